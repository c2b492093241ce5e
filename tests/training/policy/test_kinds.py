"""The strategy kinds' registry: what is registered, how a strategy finds its kind, what a file without one means.

    .venv/bin/python -m pytest -q tests/training/policy/test_kinds.py

A kind defined in a test and run everywhere a strategy runs: tests/serving/gateway/test_strategy_kinds.py.
"""

from __future__ import annotations

import pytest

from training.policy import Strategy, StrategyPolicy
from training.policy.kinds import (Agree, Path, Single, StrategyKind, get, kind_named, kind_of, names, register,
                                   unregister)


def test_the_registry_lists_single_and_agree_and_an_unknown_name_lists_them():
    assert names()[:2] == ["single", "agree"]
    assert isinstance(get("single"), Single) and isinstance(get("agree"), Agree)
    with pytest.raises(ValueError, match="unknown strategy kind 'best-of-three'; known: agree, single"):
        get("best-of-three")
    with pytest.raises(ValueError, match="unknown strategy kind 'best-of-three'"):
        Strategy(("a", "b", "c"), kind="best-of-three")


def test_a_kind_is_registered_once_by_its_name_and_taken_out_again():
    class Echo(StrategyKind):
        """Every first model asked together; the first one's answer goes back."""

        name = "echo"

        def check(self, s):
            pass

        def title(self, s):
            return f"echo({s.first[0]})"

        def walk(self, s, answers, price):
            return Path(s.first, s.first[0])

        async def execute(self, s, ex):
            ex.answer((await ex.together(s.first))[0], "echo")

    class Unfinished(StrategyKind):
        name = "unfinished"

        def check(self, s):
            pass

    with pytest.raises(TypeError, match="abstract method"):
        register(Unfinished)
    assert "unfinished" not in names()
    register(Echo)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register(Echo)
        s = Strategy(("a", "b", "c"), kind="echo")  # three first models: fine for a kind that says so
        assert kind_of(s) is get("echo") and s.name == "echo(a)" and kind_named(s.name) is get("echo")
        with pytest.raises(ValueError, match="echo calls each first model once"):
            Strategy(("a", "a"), kind="echo")
    finally:
        unregister("echo")
    assert "echo" not in names()
    with pytest.raises(TypeError, match="StrategyKind subclass with a name"):
        register(Single())  # an instance, not the class


def test_a_strategy_without_a_kind_is_single_for_one_model_and_agree_for_two():
    """router.json files, configs and requests written before kinds were named load as they did."""
    old = {"name": "agree(a, b → c)", "first": ["a", "b"], "tie_breaker": None, "escalate": ["c"], "resolve": {}}
    s = Strategy.from_dict(old)
    assert s == Strategy.agree("a", "b", escalate=("c",)) and s.to_dict() == {"kind": "agree", **old}
    assert Strategy.from_dict({"first": ["a"], "escalate": ["b"]}) == Strategy.single("a", ("b",))
    assert Strategy.from_dict({"kind": "single", "first": ["a"]}).kind == "single"
    with pytest.raises(ValueError, match="single calls one model first"):
        Strategy.from_dict({"kind": "single", "first": ["a", "b"]})
    with pytest.raises(ValueError, match="kind is the name of a strategy kind"):
        Strategy.from_dict({"kind": 2, "first": ["a", "b"], "escalate": ["c"]})
    with pytest.raises(ValueError, match="one model or two"):
        Strategy(("a", "b", "c"))


def test_a_policy_file_with_a_kind_it_does_not_know_says_which_kinds_it_knows():
    policy = {"models": ["a", "b"], "menu": [{"kind": "cheapest-two", "first": ["a", "b"]}], "mean": [0, 0],
              "scale": [1, 1], "coef": [[0, 0]], "intercept": [0], "costs": [1e-4], "lam": 1.0}
    with pytest.raises(ValueError, match="router.json: unknown strategy kind 'cheapest-two'; known: agree, single"):
        StrategyPolicy.from_json(policy, source="router.json")


def test_kinds_name_their_strategies_and_their_first_step():
    single, agree = Strategy.single("a", ("b",)), Strategy.agree("a", "b", tie_breaker="t", escalate=("e",))
    assert (single.name, agree.name) == ("single(a)", "agree(a, b, t → e)")
    assert kind_of(single).first_step(single) == ("a",) and kind_of(agree).first_step(agree) == ("a", "b")
    assert kind_of(single).one_at_a_time and not kind_of(agree).one_at_a_time
    assert kind_of(agree).compares and not kind_of(single).compares
    assert kind_named("agree(a, b → e)") is get("agree") and kind_named("single(x)") is get("single")
