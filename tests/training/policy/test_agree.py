"""The agreement cascade's rules, one case each: what it does after the first answers, after the tie-breaker,
on escalation, and which model is the cheaper (training/policy/kinds/agree.py).

    .venv/bin/python -m pytest -q tests/training/policy/test_agree.py
"""

from __future__ import annotations

import math

from training.policy import Strategy
from training.policy.kinds import Path, cheaper, escalation, kind_of
from training.policy.kinds.agree import ANSWER, ESCALATE, TIE_BREAKER, Step, after_first, after_tie_breaker

PRICE = {"a": 1.0, "b": 2.0, "t": 0.5, "e": 10.0}
S = Strategy.agree("a", "b", tie_breaker="t", escalate=("e",))


class Told:
    """Answers where the pairs in `agreeing` agree and every other pair disagrees as `kind`."""

    def __init__(self, agreeing=(), kind=None):
        self.agreeing, self.kind = {frozenset(p) for p in agreeing}, kind

    def agree(self, x, y):
        return frozenset((x, y)) in self.agreeing

    def disagreement(self, x, y):
        return self.kind

    def called(self, x):
        raise AssertionError("an agreement does not ask whether one answer makes a call")


def walk(strategy, answers):
    return kind_of(strategy).walk(strategy, answers, PRICE)


def test_the_cheaper_is_by_price_ties_go_to_the_first_named_and_an_unpriced_model_never_is():
    assert cheaper(PRICE, "b", "a") == "a"
    assert cheaper({"a": 1.0, "b": 1.0}, "b", "a") == "b"
    assert cheaper({"a": 5.0}, "x", "a") == "a" and cheaper({"a": math.nan, "b": 9.0}, "a", "b") == "b"


def test_two_answers_that_agree_answer_with_the_cheaper():
    assert after_first(S, True, None, PRICE) == Step(ANSWER, "a", "agree")
    assert after_first(S, True, None, {"a": 3.0, "b": 2.0}) == Step(ANSWER, "b", "agree")


def test_a_disagreement_asks_the_tie_breaker_or_escalates_without_one():
    assert after_first(S, False, "arguments", PRICE) == Step(TIE_BREAKER)
    assert after_first(S, False, None, PRICE) == Step(TIE_BREAKER)  # a first model gave no answer
    alone = Strategy.agree("a", "b", escalate=("e",))
    assert after_first(alone, False, "count", PRICE) == Step(ESCALATE, verdict="disagree")


def test_a_resolve_rule_answers_at_once_or_skips_the_tie_breaker_for_its_kind_only():
    s = Strategy.agree("a", "b", tie_breaker="t", escalate=("e",),
                       resolve={"first_declines": "second", "second_declines": "first", "count": "escalate"})
    assert after_first(s, False, "first_declines", PRICE) == Step(ANSWER, "b", "resolved")
    assert after_first(s, False, "second_declines", PRICE) == Step(ANSWER, "a", "resolved")
    assert after_first(s, False, "count", PRICE) == Step(ESCALATE, verdict="disagree")
    assert after_first(s, False, "arguments", PRICE) == Step(TIE_BREAKER)
    assert after_first(s, False, None, PRICE) == Step(TIE_BREAKER)  # no kind: no rule applies


def test_the_tie_breaker_answers_with_the_cheaper_of_the_pair_it_sides_with():
    assert after_tie_breaker(S, (False, True), PRICE) == Step(ANSWER, "t", "tie_broken")  # t is cheaper than b
    assert after_tie_breaker(S, (True, False), {"a": 1.0, "t": 3.0}) == Step(ANSWER, "a", "tie_broken")
    assert after_tie_breaker(S, (True, True), {"a": 2.0, "b": 1.0, "t": 3.0}) == Step(ANSWER, "b", "tie_broken")
    assert after_tie_breaker(S, (False, False), PRICE) == Step(ESCALATE, verdict="disagree")


def test_escalation_goes_through_escalate_then_the_ranking():
    s = Strategy.agree("a", "b", escalate=("e", "b"))
    assert escalation(s, ["t", "e", "a"]) == ["e", "b", "t", "a"]


def test_a_whole_run_reuses_an_answer_in_hand_and_pays_every_call():
    assert walk(S, Told(kind="arguments")) == Path(("a", "b", "t", "e"), "e", "disagree", escalated=True)
    to_t = Strategy.agree("a", "b", tie_breaker="t", escalate=("t",))
    assert walk(to_t, Told(kind="arguments")) == Path(("a", "b", "t"), "t", "disagree", reused=True, escalated=True)
    skip = Strategy.agree("a", "b", tie_breaker="t", escalate=("t",), resolve={"arguments": "escalate"})
    assert walk(skip, Told(kind="arguments")) == Path(("a", "b", "t"), "t", "disagree", escalated=True)
    sided = walk(S, Told([("b", "t")], "count"))
    assert sided == Path(("a", "b", "t"), "t", "tie_broken", escalated=True)
    assert walk(S, Told([("a", "b")])) == Path(("a", "b"), "a", "agree")
    resolved = Strategy.agree("a", "b", escalate=("e",), resolve={"count": "second"})
    assert walk(resolved, Told(kind="count")) == Path(("a", "b"), "b", "resolved")
    single = Strategy.single("a", ("b",))
    assert walk(single, Told()) == Path(("a",), "a") and kind_of(single).first_step(single) == ("a",)
    assert kind_of(S).first_step(S) == ("a", "b")  # called together: the budget holds both
