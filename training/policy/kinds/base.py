"""What a strategy kind answers, and what kinds share.

    class Single(StrategyKind):
        name = "single"
        def check(self, s): ...                       # the roles this kind needs (ValueError says which is wrong)
        def title(self, s): return f"single({s.first[0]})"
        def walk(self, s, answers, price): ...       # offline: the run when every model answers
        async def execute(self, s, ex): ...          # the gateway: what to call, when to stop, whose answer

A kind is told about the answers it gets through one of two views, so the kind itself imports nothing of the
offline data or of the gateway: `Answers`, one request whose every model answered (a row of recordings in
`training.policy.simulate`, a logged request in `training.policy.replay`), and `Executor`, the gateway's live
calls (`serving/gateway/cascade.py`), which adds what only live calls have: failures, retries, hedges, a cap on
new calls, the budget's hold before each call.

Roles a strategy gives its models (`training.policy.strategy.Strategy`): `first` (the first step, called together
before any answer is in: the budget holds their worst case, the trace lays them side by side), `tie_breaker`,
`escalate` (in order; a strategy's fallbacks are appended here), `resolve` (rules by kind of disagreement). A kind
uses the roles it needs and refuses the others in `check`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from data.verify.agree import DISAGREEMENT_KINDS


class StrategyRoles(Protocol):
    """What a kind reads of a strategy (`training.policy.strategy.Strategy`, which asks its kind in turn)."""

    kind: str
    first: tuple[str, ...]
    tie_breaker: str | None
    escalate: tuple[str, ...]
    resolve: tuple[tuple[str, str], ...]

    @property
    def models(self) -> tuple[str, ...]:
        """Every model the strategy may call, in the order it would."""

    def action_for(self, kind: str | None) -> str | None:
        """The resolve rule for a disagreement of this kind."""


@dataclass(frozen=True)
class Path:
    """A whole run when every model answers: the calls made (all paid), in order, and whose answer goes back."""

    calls: tuple[str, ...]  # the first step's models (called together), then one at a time
    returned: str
    verdict: str | None = None  # how an agreement was settled; None where no answers were compared
    reused: bool = False  # the returned answer came from a call made earlier in the run
    escalated: bool = False  # the run went past its first answers (a tie-breaker, an escalation)


def cheaper(price: Mapping[str, float], *models: str) -> str:
    """The model of `models` with the lowest price; unpriced (or NaN) is never the cheaper; ties: the first."""
    def key(m: str) -> float:
        p = price.get(m)
        return math.inf if p is None or p != p else float(p)

    best = models[0]
    for m in models[1:]:
        if key(m) < key(best):
            best = m
    return best


def escalation(strategy: StrategyRoles, ranking: Sequence[str] = ()) -> list[str]:
    """The order a run escalates in: `escalate`, then the rest of the request's ranking."""
    return [*strategy.escalate, *(m for m in ranking if m not in strategy.escalate)]


class Answers(Protocol):
    """One request on which every model answered: a row of recordings, or a logged request."""

    def agree(self, x: str, y: str) -> bool:
        """Do x's and y's decoded calls agree in meaning (`data.verify.agree.calls_agree`)?"""

    def disagreement(self, x: str, y: str) -> str | None:
        """How x and y disagree (`data.verify.agree.disagreement_kind`); None when it is not known."""

    def called(self, x: str) -> bool:
        """Does x's answer make a tool call?"""


class Called(Protocol):
    """One live upstream call (serving/gateway/cascade.py `CallRecord`)."""

    model: str

    @property
    def ok(self) -> bool:
        """An answer the caller may get."""

    @property
    def calls(self) -> list | None:
        """The decoded calls of a usable answer ([] for none); None when the call gave no usable answer."""


class Executor(Protocol):
    """A strategy's run on live upstreams (serving/gateway/cascade.py): every call is recorded, paid and traced."""

    price: Mapping[str, float]  # the decision's expected cost per model: which answer is cheaper

    async def together(self, models: Sequence[str]) -> list[Called]:
        """The first step: `models` called concurrently (role `first`), in the order given."""

    async def call(self, model: str, role: str) -> Called:
        """One further call, made alone (role: tie_breaker, or a kind's own)."""

    def compare(self, x: Called, y: Called) -> tuple[bool, str | None]:
        """An agreement check, recorded in the trace: (agree, how they disagree); a silent model agrees with
        nothing and has no kind of disagreement."""

    def verdict(self, verdict: str | None) -> None:
        """How the agreement was settled (the trace, the `x-switchcraft-agreement` header, metrics)."""

    def answer(self, rec: Called, rule: str, *, reused: bool = False) -> None:
        """`rec`'s answer goes back; `rule` says why (the trace's `returned.rule`)."""

    async def fallbacks(self, models: Sequence[str]) -> None:
        """One model at a time until one answers (the first may be hedged); a request the upstream rejects goes
        back to the caller. Raises the caller's error when none answers."""

    async def escalate(self, held: Mapping[str, Called]) -> None:
        """The escalation order (`escalation`): the first that answers goes back, an answer in `held` again at no
        cost. Raises the caller's error when none answers."""


class StrategyKind(ABC):
    """One kind of routing strategy: everything the places that name, run, price, simulate or show a strategy
    need to know of it. Subclass, set `name`, implement `check`, `title`, `walk` and `execute`; register it
    (`training.policy.kinds.register`)."""

    name: ClassVar[str]
    compares: ClassVar[bool] = False  # runs compare answers: the trace has an `agreement` section and a verdict
    # Asks its models in turn until one answers: a stream runs it as it is; a session may keep its previous model.
    one_at_a_time: ClassVar[bool] = False
    # Its answer is the first model's as the model wrote it (later models only when a call fails): a caller whose
    # API that model's provider speaks may be passed through (serving/gateway/passthrough.py).
    answers_as_written: ClassVar[bool] = False

    @abstractmethod
    def check(self, s: StrategyRoles) -> None:
        """Raise ValueError, saying what is wrong, when `s` does not give the roles this kind needs."""

    @abstractmethod
    def title(self, s: StrategyRoles) -> str:
        """The strategy's name, `<kind name>(…)`: the trace, the `x-switchcraft-strategy` header, the decision log,
        the console, the reports."""

    def first_step(self, s: StrategyRoles) -> tuple[str, ...]:
        """The models called before any answer is in (together): what the budget holds before the first call."""
        return s.first

    @abstractmethod
    def walk(self, s: StrategyRoles, answers: Answers, price: Mapping[str, float]) -> Path:
        """The run on one request whose every model answered (recordings, logged answers): the calls made and whose
        answer goes back. "Cheaper" is by `price`."""

    def simulate(self, cd: Any, s: StrategyRoles, price: Mapping[str, float], memo: dict | None = None) -> tuple:
        """`s` on every row of `cd` (`training.policy.simulate.CascadeData`): per row, whether the returned answer
        is right, the cost of every call, the latency (the slowest of the first step, then each later call), the
        calls made and whether it escalated. By default `walk` row by row; a kind on the fitted menu vectorises."""
        return walk_rows(cd, self, s, price)

    @abstractmethod
    async def execute(self, s: StrategyRoles, ex: Executor) -> None:
        """Run `s` on live upstreams: make calls through `ex` and end with `ex.answer` (or a raised error)."""

    def __repr__(self) -> str:
        return f"<strategy kind {self.name!r}>"


class RecordedRow:
    """Row `i` of recordings (`training.policy.simulate.CascadeData`) as the answers a kind walks."""

    def __init__(self, cd: Any, i: int, col: Mapping[str, int]) -> None:
        self.cd, self.i, self.col = cd, i, col

    def agree(self, x: str, y: str) -> bool:
        return bool(self.cd.agree[self.i, self.col[x], self.col[y]])

    def disagreement(self, x: str, y: str) -> str | None:
        code = 0 if self.cd.kinds is None else int(self.cd.kinds[self.i, self.col[x], self.col[y]])
        return DISAGREEMENT_KINDS[code - 1] if code else None

    def called(self, x: str) -> bool:
        if self.cd.called is None:
            raise ValueError("whether an answer makes a call is read from the outputs: build CascadeData with "
                             "from_outputs")
        return bool(self.cd.called[self.i, self.col[x]])


def walk_rows(cd: Any, kind: StrategyKind, s: StrategyRoles, price: Mapping[str, float]) -> tuple:
    """`kind.walk` on each row of `cd`: the returned answer's label, every call paid, the latency of the first
    step's slowest call plus each later call, the calls made, whether it escalated."""
    d, lat = cd.data, cd.latency
    col = {m: j for j, m in enumerate(d.models)}
    n = len(d.correct)
    together = len(kind.first_step(s))
    correct, cost, latency = np.zeros(n, bool), np.zeros(n), np.zeros(n)
    calls, escalated = np.zeros(n, int), np.zeros(n, bool)
    for i in range(n):
        path = kind.walk(s, RecordedRow(cd, i, col), price)
        js = [col[m] for m in path.calls]
        correct[i], cost[i] = d.correct[i, col[path.returned]], d.cost[i, js].sum()
        latency[i] = lat[i, js[:together]].max() + lat[i, js[together:]].sum()
        calls[i], escalated[i] = len(path.calls), path.escalated
    return correct, cost, latency, calls, escalated
