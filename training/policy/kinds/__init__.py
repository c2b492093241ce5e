"""Strategy kinds by name: one class per kind, asked by everyone who names, runs, prices, simulates or shows one.

    from training.policy.kinds import get, kind_of, names, register
    names()                                    # ['single', 'agree']
    kind_of(strategy).first_step(strategy)     # what the budget holds before the first call
    kind_of(strategy).walk(strategy, answers, price)   # offline: the run when every model answers
    await kind_of(strategy).execute(strategy, executor)  # the gateway's run

A strategy (`training.policy.strategy.Strategy`) carries its kind's name (`kind`; in `router.json`, configs and
requests too, where a strategy without one is `single` for one first model and `agree` for two). The places that
handle strategies ask its kind (`StrategyKind`, training/policy/kinds/base.py) instead of branching on the name:
`Strategy` (its checks and name), the simulation and the replay (`walk`, `simulate`), the policy, the gateway's
cascade (`execute`), the budget (`first_step`), the trace (`compares`) and the chat path (`one_at_a_time`).

Adding a kind: a module with a `StrategyKind` subclass and `register(MyKind)`; nothing else changes.
"""

from __future__ import annotations

from data.registry import Registry, UnknownNameError
from training.policy.kinds.agree import Agree
from training.policy.kinds.base import (Answers, Called, Executor, Path, RecordedRow, StrategyKind, StrategyRoles,
                                        cheaper, escalation, walk_rows)
from training.policy.kinds.single import Single

__all__ = ["Agree", "Answers", "Called", "Executor", "Path", "RecordedRow", "Single", "StrategyKind",
           "StrategyRoles", "cheaper", "escalation", "get", "kind_named", "kind_of", "names", "register",
           "unregister", "walk_rows"]

KINDS: Registry[StrategyKind] = Registry("strategy kind")


def register(kind: type[StrategyKind]) -> type[StrategyKind]:
    """Register a kind under its `name` (a duplicate raises); usable as a class decorator."""
    if not (isinstance(kind, type) and issubclass(kind, StrategyKind)) or not getattr(kind, "name", ""):
        raise TypeError(f"a strategy kind is a StrategyKind subclass with a name, got {kind!r}")
    KINDS.add(kind.name, kind())  # an abstract method left out: TypeError naming it
    return kind


def unregister(name: str) -> None:
    """Take a kind out again (a test's own kind, once the test is done)."""
    KINDS.remove(name)


def get(name: str) -> StrategyKind:
    """The kind registered as `name`; ValueError listing the known kinds otherwise."""
    try:
        return KINDS.get(name)
    except UnknownNameError as e:
        raise ValueError(str(e)) from None


def names() -> list[str]:
    """The registered kinds, in the order they were registered."""
    return KINDS.names()


def kind_of(strategy) -> StrategyKind:
    """The kind of a `Strategy`."""
    return get(strategy.kind)


def kind_named(title: str) -> StrategyKind:
    """The kind of a strategy known only by its name (`agree(a, b → e)`: a report's, a log's): the kind's name
    opens it (`StrategyKind.title`)."""
    return get(title.split("(", 1)[0])


register(Single)
register(Agree)
