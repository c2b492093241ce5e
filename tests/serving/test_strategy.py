"""Strategy: validation, names, round trip."""

import pytest

from serving.strategy import Strategy


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
