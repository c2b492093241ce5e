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


def test_remove_takes_an_entry_out_and_an_unknown_one_lists_the_known():
    r: Registry[int] = Registry("widget")
    r.add("a", 1)
    r.add("b", 2)
    assert r.remove("a") == 1 and r.names() == ["b"] and "a" not in r
    with pytest.raises(UnknownNameError, match="known: b"):
        r.remove("a")
    r.add("a", 3)  # the name is free again
    assert r.get("a") == 3
