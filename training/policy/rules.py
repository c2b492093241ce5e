"""The cascade's rules, in one place: given what the calls so far said, what a strategy does next.

    from training.policy.rules import after_first, after_tie_breaker, escalation, walk
    after_first(strategy, agree=False, kind="arguments", price=costs)   # Step("tie_breaker")
    after_tie_breaker(strategy, (False, True), price=costs)             # Step("answer", "b", "tie_broken")
    walk(strategy, agree=..., kind=..., price=costs)                    # the whole run when every model answers

Every place that runs a strategy takes its decisions from here: the gateway on live calls
(`serving/gateway/cascade.py`, which adds what only live calls have: failures, retries, a cap on new calls),
the vectorised simulation on recordings (`training.policy.simulate`, which asks `walk` once per kind of row)
and the replay of logged answers (`training.policy.replay`). The rules of an agreement cascade:

1. call `first` (two models) concurrently;
2. if their decoded calls agree in meaning (`data.verify.agree.calls_agree`; two non-calls agree), answer with
   the cheaper one's answer (verdict `agree`);
3. otherwise, if `resolve` has a rule for *how* they disagree (`data.verify.agree.disagreement_kind`:
   first_declines, second_declines, count, functions, arguments), follow it: `first` / `second` answers with
   that model's answer at once (`resolved`), `escalate` skips the tie-breaker; a kind with no rule (and a first
   model that gave no answer: no kind) goes on to 4;
4. if there is a tie-breaker, call it; if it agrees with one of the first two, answer with the cheaper model of
   that agreeing pair, with both the cheapest of the three (`tie_broken`);
5. otherwise (`disagree`) answer with the first of `escalate` that answers, then the request's ranking: a model
   already called answers again at no cost.

Every call made is paid; a reused answer is not. "Cheaper" is by `price` (model -> expected cost); a model it
does not price is never the cheaper, and ties go to the first named. A single strategy calls its model, then
its fallbacks (`escalate`) one at a time while they fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from training.policy.strategy import Strategy

ANSWER, TIE_BREAKER, ESCALATE = "answer", "tie_breaker", "escalate"
ESCALATED = ("tie_broken", "disagree")  # verdicts after which the tie-breaker or an escalation was asked


@dataclass(frozen=True)
class Step:
    """What the cascade does next: answer with `model`'s answer, ask the tie-breaker, or escalate."""

    do: str  # answer | tie_breaker | escalate
    model: str | None = None  # answer: whose answer goes back
    verdict: str | None = None  # agree | resolved | tie_broken | disagree: set when the agreement is settled


@dataclass(frozen=True)
class Path:
    """A whole run when every model answers: the calls made (all paid), in order, and whose answer goes back."""

    calls: tuple[str, ...]  # the first one or two called together, then one at a time
    returned: str
    verdict: str | None  # None for a single model
    reused: bool = False  # the returned answer came from a call made earlier in the cascade

    @property
    def concurrent(self) -> int:
        """How many of `calls` were made together at first (latency: the slower of them)."""
        return min(2, len(self.calls)) if self.verdict is not None else 1

    @property
    def escalated(self) -> bool:
        return self.verdict in ESCALATED


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


def after_first(strategy: Strategy, agree: bool, kind: str | None, price: Mapping[str, float]) -> Step:
    """Rules 2–3: the step after the two first models answered (`kind`: how they disagree; None when a first
    model gave no answer)."""
    a, b = strategy.first
    if agree:
        return Step(ANSWER, cheaper(price, a, b), "agree")
    action = strategy.action_for(kind)
    if action in ("first", "second"):
        return Step(ANSWER, a if action == "first" else b, "resolved")
    if strategy.tie_breaker is not None and action != "escalate":
        return Step(TIE_BREAKER)
    return Step(ESCALATE, verdict="disagree")


def after_tie_breaker(strategy: Strategy, agrees: tuple[bool, bool], price: Mapping[str, float]) -> Step:
    """Rule 4: the step after the tie-breaker answered; `agrees`: does it agree with first[0], with first[1]."""
    t = strategy.tie_breaker
    agreeing = [m for m, ok in zip(strategy.first, agrees) if ok]
    if agreeing:
        return Step(ANSWER, cheaper(price, *(cheaper(price, m, t) for m in agreeing)), "tie_broken")
    return Step(ESCALATE, verdict="disagree")


def escalation(strategy: Strategy, ranking: Sequence[str] = ()) -> list[str]:
    """Rule 5's order: `escalate`, then the rest of the request's ranking."""
    return [*strategy.escalate, *(m for m in ranking if m not in strategy.escalate)]


def walk(strategy: Strategy, agree: Callable[[str, str], bool], kind: Callable[[str, str], str | None],
         price: Mapping[str, float]) -> Path:
    """The whole run of `strategy` when every model answers (recordings, logged answers): `agree(x, y)` says
    whether two models' answers agree, `kind(x, y)` how they disagree."""
    if strategy.kind == "single":
        return Path((strategy.first[0],), strategy.first[0], None)
    a, b = strategy.first
    calls = [a, b]
    same = agree(a, b)
    step = after_first(strategy, same, None if same else kind(a, b), price)
    if step.do == TIE_BREAKER:
        t = strategy.tie_breaker
        calls.append(t)
        step = after_tie_breaker(strategy, (agree(a, t), agree(b, t)), price)
    if step.do == ANSWER:
        return Path(tuple(calls), step.model, step.verdict)
    e = escalation(strategy)[0]  # every model answers: the first of escalate; one in hand is reused
    reused = e in calls
    if not reused:
        calls.append(e)
    return Path(tuple(calls), e, step.verdict, reused)
