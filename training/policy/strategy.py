"""A routing decision as a *strategy*: its kind and the models it gives each role.

    from training.policy import Strategy
    Strategy.single("gpt-4o-mini")                                   # one model (its fallbacks after it)
    Strategy.agree("gpt-4o-mini", "gemini-1.5-flash", escalate=("claude-3-5-sonnet",))
    Strategy.agree("a", "b", tie_breaker="c", escalate=("d", "e"))  # d first, e if d fails
    Strategy.agree("a", "b", escalate=("d",), resolve={"count": "first"})  # a rule for one kind of disagreement
    Strategy(("a", "b"), escalate=("d",), kind="agree")             # any registered kind by name

What a strategy is (its kind, its models, its resolve rules, its JSON in `router.json`); what it does with the
answers it gets is its kind's (`training.policy.kinds`: `single`, `agree`, and any kind registered there), the one
copy the gateway, the offline simulation and the replay of logged traffic all follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from data.verify.agree import DISAGREEMENT_KINDS
from training.policy.kinds import get as get_kind

RESOLVE_ACTIONS = ("first", "second", "escalate")
IMPLIED_KINDS = {1: "single", 2: "agree"}  # a strategy written without a kind (configs, requests, older files)


@dataclass(frozen=True)
class Strategy:
    first: tuple[str, ...]  # the first step: called together before any answer is in (single: one; agree: two)
    tie_breaker: str | None = None
    escalate: tuple[str, ...] = ()  # on disagreement, in order; for a single: its fallbacks
    resolve: tuple[tuple[str, str], ...] = ()  # (disagreement kind, action), sorted: what to do without asking more
    kind: str | None = None  # a registered kind (training.policy.kinds); None: IMPLIED_KINDS by the first models

    def __post_init__(self) -> None:
        if self.kind is not None and not isinstance(self.kind, str):
            raise ValueError(f"a strategy's kind is the name of a strategy kind, got {self.kind!r}")
        if self.kind is None:
            if len(self.first) not in IMPLIED_KINDS:
                raise ValueError(f"a strategy calls one model or two at first, got {list(self.first)}")
            object.__setattr__(self, "kind", IMPLIED_KINDS[len(self.first)])
        get_kind(self.kind).check(self)
        if len(set(self.first)) != len(self.first):
            raise ValueError(f"{self.kind} calls each first model once, got {list(self.first)}")
        for kind, action in self.resolve:
            if kind not in DISAGREEMENT_KINDS:
                raise ValueError(f"resolve: unknown disagreement kind {kind!r} (kinds: {', '.join(DISAGREEMENT_KINDS)})")
            if action not in RESOLVE_ACTIONS:
                raise ValueError(f"resolve[{kind}]: unknown action {action!r} (actions: {', '.join(RESOLVE_ACTIONS)})")
        if len({k for k, _ in self.resolve}) != len(self.resolve):
            raise ValueError("resolve: one rule per disagreement kind")
        object.__setattr__(self, "resolve", tuple(sorted(self.resolve, key=lambda r: DISAGREEMENT_KINDS.index(r[0]))))

    @classmethod
    def single(cls, model: str, fallbacks: tuple[str, ...] = ()) -> Strategy:
        return cls((model,), None, tuple(fallbacks))

    @classmethod
    def agree(cls, a: str, b: str, *, tie_breaker: str | None = None, escalate: tuple[str, ...],
              resolve: Mapping[str, str] | None = None) -> Strategy:
        return cls((a, b), tie_breaker, tuple(escalate), tuple((resolve or {}).items()))

    def action_for(self, kind: str | None) -> str | None:
        """The rule for a disagreement of this kind (None: no rule, go on to the tie-breaker / escalation)."""
        return dict(self.resolve).get(kind) if kind else None

    @property
    def models(self) -> tuple[str, ...]:
        """Every model the strategy may call, in the order it would."""
        seen: list[str] = []
        for m in (*self.first, *((self.tie_breaker,) if self.tie_breaker else ()), *self.escalate):
            if m not in seen:
                seen.append(m)
        return tuple(seen)

    @property
    def name(self) -> str:
        """Its kind's name for it: `single(a)`, `agree(a, b, t → e; count: first)`."""
        return get_kind(self.kind).title(self)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "first": list(self.first), "tie_breaker": self.tie_breaker,
                "escalate": list(self.escalate), "resolve": dict(self.resolve)}

    @classmethod
    def from_dict(cls, d: dict) -> Strategy:
        """`to_dict`'s output, or a strategy written by hand (`kind` optional: see IMPLIED_KINDS; `name` ignored)."""
        try:
            resolve = d.get("resolve") or {}
            if not isinstance(resolve, Mapping):
                raise ValueError(f"a strategy's resolve is a mapping of disagreement kind to action, got {resolve!r}")
            return cls(tuple(d["first"]), d.get("tie_breaker"), tuple(d.get("escalate") or ()), tuple(resolve.items()),
                       d.get("kind"))
        except KeyError as e:
            raise ValueError(f"a strategy needs {e.args[0]!r} (got keys {sorted(d)})") from None
