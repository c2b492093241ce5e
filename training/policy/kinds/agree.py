"""agree(a, b[, t] → e…): an agreement cascade, and its rules in one place.

    Strategy.agree("a", "b", tie_breaker="t", escalate=("e",), resolve={"count": "first"})
    after_first(strategy, agree=False, kind="arguments", price=costs)   # Step("tie_breaker")
    after_tie_breaker(strategy, (False, True), price=costs)             # Step("answer", "b", "tie_broken")

Every place that runs an agreement takes its decisions from here: the gateway on live calls (`Agree.execute`,
through serving/gateway/cascade.py, which adds what only live calls have: failures, retries, a cap on new calls),
the vectorised simulation on recordings (`Agree.simulate`, which walks once per kind of row) and the replay of
logged answers (`Agree.walk`). The rules:

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
does not price is never the cheaper, and ties go to the first named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import numpy as np

from data.verify.agree import DISAGREEMENT_KINDS
from training.policy.kinds.base import Answers, Executor, Path, StrategyKind, StrategyRoles, cheaper, escalation

ANSWER, TIE_BREAKER, ESCALATE = "answer", "tie_breaker", "escalate"
ESCALATED = ("tie_broken", "disagree")  # verdicts after which the tie-breaker or an escalation was asked
CASES = 1 + 4 * (1 + len(DISAGREEMENT_KINDS))  # agree; else 1 + 4 × kind code (0: unknown) + 2 × t~a + t~b


@dataclass(frozen=True)
class Step:
    """What the cascade does next: answer with `model`'s answer, ask the tie-breaker, or escalate."""

    do: str  # answer | tie_breaker | escalate
    model: str | None = None  # answer: whose answer goes back
    verdict: str | None = None  # agree | resolved | tie_broken | disagree: set when the agreement is settled


def after_first(strategy: StrategyRoles, agree: bool, kind: str | None, price: Mapping[str, float]) -> Step:
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


def after_tie_breaker(strategy: StrategyRoles, agrees: tuple[bool, bool], price: Mapping[str, float]) -> Step:
    """Rule 4: the step after the tie-breaker answered; `agrees`: does it agree with first[0], with first[1]."""
    t = strategy.tie_breaker
    agreeing = [m for m, ok in zip(strategy.first, agrees) if ok]
    if agreeing:
        return Step(ANSWER, cheaper(price, *(cheaper(price, m, t) for m in agreeing)), "tie_broken")
    return Step(ESCALATE, verdict="disagree")


class Agree(StrategyKind):
    name = "agree"
    compares = True

    def check(self, s: StrategyRoles) -> None:
        if len(s.first) != 2:
            raise ValueError(f"agree calls two models first, got {list(s.first)}")
        if s.first[0] == s.first[1]:
            raise ValueError(f"an agreement needs two different models, got {list(s.first)}")
        if s.tie_breaker is not None and s.tie_breaker in s.first:
            raise ValueError("a tie-breaker needs two first models and must differ from them")
        if not s.escalate:
            raise ValueError(f"agree({', '.join(s.first)}) needs a model to escalate to")

    def title(self, s: StrategyRoles) -> str:
        tb = f", {s.tie_breaker}" if s.tie_breaker else ""
        rules = "; " + ", ".join(f"{k}: {a}" for k, a in s.resolve) if s.resolve else ""
        return f"agree({s.first[0]}, {s.first[1]}{tb} → {s.escalate[0]}{rules})"

    def walk(self, s: StrategyRoles, answers: Answers, price: Mapping[str, float]) -> Path:
        a, b = s.first
        calls = [a, b]
        same = answers.agree(a, b)
        step = after_first(s, same, None if same else answers.disagreement(a, b), price)
        if step.do == TIE_BREAKER:
            t = s.tie_breaker
            calls.append(t)
            step = after_tie_breaker(s, (answers.agree(a, t), answers.agree(b, t)), price)
        escalated = step.verdict in ESCALATED
        if step.do == ANSWER:
            return Path(tuple(calls), step.model, step.verdict, escalated=escalated)
        e = escalation(s)[0]  # every model answers: the first of escalate; one in hand is reused
        reused = e in calls
        if not reused:
            calls.append(e)
        return Path(tuple(calls), e, step.verdict, reused, escalated)

    def simulate(self, cd, s: StrategyRoles, price: Mapping[str, float], memo: dict | None = None) -> tuple:
        """Vectorised: a row's run depends only on whether a and b agree, how they disagree, and whether t agrees
        with each (`row_cases`); each case that occurs is walked once and its rows take that run's calls (all
        paid, the first two concurrent) and the label of whose answer goes back."""
        d, lat = cd.data, cd.latency
        col = {m: j for j, m in enumerate(d.models)}
        n = len(d.correct)
        if s.resolve and cd.kinds is None:
            raise ValueError("resolve rules need the kinds of disagreement: build CascadeData with from_outputs")
        ja, jb = col[s.first[0]], col[s.first[1]]
        case, present = row_cases(cd, ja, jb, col.get(s.tie_breaker), memo)
        returned, calls, escalated = np.zeros(CASES, int), np.zeros(CASES, int), np.zeros(CASES, bool)
        later = np.full((2, CASES), -1)  # the third and fourth calls' columns per case (-1: none)
        for c in present:
            path = self.walk(s, CaseAnswers(s, c), price)
            returned[c], calls[c], escalated[c] = col[path.returned], len(path.calls), path.escalated
            for k, m in enumerate(path.calls[2:]):  # one at a time after the first two
                later[k, c] = col[m]
        rows = np.arange(n)
        paid, took = d.cost[:, ja] + d.cost[:, jb], np.maximum(lat[:, ja], lat[:, jb])
        for k in range(2):
            j = later[k][case]
            paid = paid + np.where(j >= 0, d.cost[rows, j], 0.0)  # + 0.0 where no such call: the sum unchanged
            took = took + np.where(j >= 0, lat[rows, j], 0.0)
        return d.correct[rows, returned[case]], paid, took, calls[case], escalated[case]

    async def execute(self, s: StrategyRoles, ex: Executor) -> None:
        a, b = s.first
        held = dict(zip((a, b), await ex.together((a, b))))
        agree, kind = ex.compare(held[a], held[b])  # no kind when a first model gave no answer
        step = after_first(s, agree, kind, ex.price)
        if step.do == TIE_BREAKER:
            t = held[s.tie_breaker] = await ex.call(s.tie_breaker, "tie_breaker")
            agrees = tuple(ex.compare(held[m], t)[0] for m in (a, b))
            step = after_tie_breaker(s, agrees, ex.price)
        ex.verdict(step.verdict)
        if step.do == ANSWER:
            return ex.answer(held[step.model], step.verdict)
        await ex.escalate(held)


def row_cases(cd, a: int, b: int, t: int | None, memo: dict | None = None) -> tuple[np.ndarray, list[int]]:
    """Per row, what a cascade of first models a, b (columns) and tie-breaker t can be told: 0 they agree; else
    1 + 4 × the kind code + 2 × (t agrees with a) + (t agrees with b); and the cases that occur."""
    key = (a, b, t)
    if memo is not None and key in memo:
        return memo[key]
    n = len(cd.agree)
    kind = np.zeros(n, int) if cd.kinds is None else cd.kinds[:, a, b].astype(int)
    side = np.zeros(n, int) if t is None else 2 * cd.agree[:, t, a] + cd.agree[:, t, b]
    case = np.where(cd.agree[:, a, b], 0, 1 + 4 * kind + side)
    out = case, np.unique(case).tolist()
    if memo is not None:
        memo[key] = out
    return out


class CaseAnswers:
    """The answers of a row of `case` (see `row_cases`), as far as an agreement of `s` can tell them apart."""

    def __init__(self, s: StrategyRoles, case: int) -> None:
        self.first = set(s.first)
        self.a = s.first[0]
        self.case = case
        self.code, self.side = divmod(case - 1, 4) if case else (0, 0)

    def agree(self, x: str, y: str) -> bool:
        if {x, y} == self.first:
            return self.case == 0
        return bool(self.side & 2) if self.a in (x, y) else bool(self.side & 1)  # the tie-breaker with a, with b

    def disagreement(self, x: str, y: str) -> str | None:
        return DISAGREEMENT_KINDS[self.code - 1] if self.code else None

    def called(self, x: str) -> bool:
        raise ValueError("a case of agreement does not say whether one model's answer makes a call")
