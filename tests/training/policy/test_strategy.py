"""Strategy: validation, names, round trip."""

import pytest

from training.policy import Strategy


def test_single_and_agree_names_and_models():
    s = Strategy.single("a", ("b", "c"))
    assert s.kind == "single" and s.name == "single(a)" and s.models == ("a", "b", "c")
    g = Strategy.agree("a", "b", tie_breaker="c", escalate=("d", "a"))
    assert g.kind == "agree" and g.name == "agree(a, b, c → d)" and g.models == ("a", "b", "c", "d")
    assert Strategy.from_dict(g.to_dict()) == g


@pytest.mark.parametrize("kwargs, msg", [
    (dict(first=("a", "b", "c")), "one model or two"),
    (dict(first=("a", "a"), escalate=("b",)), "two different"),
    (dict(first=("a",), tie_breaker="b"), "tie-breaker"),
    (dict(first=("a", "b"), tie_breaker="a", escalate=("c",)), "tie-breaker"),
    (dict(first=("a", "b")), "escalate"),
])
def test_invalid_strategies_say_why(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        Strategy(**kwargs)


def test_from_dict_names_missing_key():
    with pytest.raises(ValueError, match="'first'"):
        Strategy.from_dict({"escalate": ["a"]})


def test_resolve_rules_name_the_kind_and_action_and_round_trip():
    g = Strategy.agree("a", "b", tie_breaker="c", escalate=("d",), resolve={"count": "first", "first_declines": "escalate"})
    assert g.resolve == (("first_declines", "escalate"), ("count", "first"))  # in the kinds' order, whatever was given
    assert g.name == "agree(a, b, c → d; first_declines: escalate, count: first)"
    assert g.action_for("count") == "first" and g.action_for("arguments") is None and g.action_for(None) is None
    assert Strategy.from_dict(g.to_dict()) == g and g.to_dict()["resolve"] == {"first_declines": "escalate", "count": "first"}
    assert Strategy.from_dict({"first": ["a", "b"], "escalate": ["d"]}).resolve == ()  # files written before rules


@pytest.mark.parametrize("kwargs, msg", [
    (dict(first=("a",), resolve=(("count", "first"),)), "agreement of two models"),
    (dict(first=("a", "b"), escalate=("c",), resolve=(("sideways", "first"),)), "unknown disagreement kind 'sideways'"),
    (dict(first=("a", "b"), escalate=("c",), resolve=(("count", "third"),)), r"resolve\[count\]: unknown action 'third'"),
    (dict(first=("a", "b"), escalate=("c",), resolve=(("count", "first"), ("count", "second"))), "one rule per"),
])
def test_invalid_resolve_rules_say_why(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        Strategy(**kwargs)


def test_from_dict_wants_resolve_as_a_mapping():
    with pytest.raises(ValueError, match="mapping"):
        Strategy.from_dict({"first": ["a", "b"], "escalate": ["c"], "resolve": [["count", "first"]]})
