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


def test_an_entry_removed_is_unknown_again():
    r: Registry[int] = Registry("widget")
    r.add("a", 1)
    assert r.remove("a") == 1 and "a" not in r
    with pytest.raises(UnknownNameError, match="unknown widget 'a'; known: \\(none\\)"):
        r.remove("a")
    r.add("a", 2)  # the name is free again
    assert r.get("a") == 2
