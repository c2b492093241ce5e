import pytest

from data.registry import Registry, UnknownNameError


def test_duplicate_raises_and_unknown_lists_known():
    r: Registry[int] = Registry("widget")
    r.add("a", 1)
    r.register("b")(2)
    with pytest.raises(ValueError, match="already registered"):
        r.add("a", 3)
    with pytest.raises(UnknownNameError, match="known: a, b"):
        r.get("zzz")
    assert r.get("b") == 2 and r.names() == ["a", "b"]
