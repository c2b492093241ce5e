"""A name → object registry: a duplicate name raises, an unknown name lists the known ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


def import_modules(package: str, skip: set[str] | frozenset[str] = frozenset()) -> None:
    """Import every module of `package` but `skip` and the private ones (`_x`): each registers itself at import,
    so adding an entry to a registry is adding a module."""
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if mod.name not in skip and not mod.name.startswith("_"):
            importlib.import_module(f"{package}.{mod.name}")


class UnknownNameError(KeyError):
    """Raised for a name no entry was registered under; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj

    def remove(self, name: str) -> T:
        """Take `name`'s entry out (a test's own entry, once the test is done); UnknownNameError if absent."""
        entry = self.get(name)
        del self._entries[name]
        return entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
