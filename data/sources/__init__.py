"""One adapter per benchmark source, in a registry keyed by name.

An adapter is a function `(location, report, **options) -> Iterator[Example]`
registered with `@ADAPTERS.register("name")`. It yields valid Examples and
counts every row it skips in `report`, with the reason; bad input that cannot
be skipped safely raises `DataError` naming file, line and field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from data.registry import Registry, import_modules
from data.schema import Example


@dataclass
class IngestReport:
    """Counts of what was read and of what was skipped, and why."""

    counts: Counter = field(default_factory=Counter)  # (source, category) -> n
    skipped: Counter = field(default_factory=Counter)  # (source, reason) -> n
    notes: list[str] = field(default_factory=list)

    def add(self, example: Example) -> None:
        self.counts[(example.source, example.category)] += 1

    def skip(self, source: str, reason: str, n: int = 1) -> None:
        self.skipped[(source, reason)] += n

    def total(self, source: str | None = None) -> int:
        return sum(n for (s, _), n in self.counts.items() if source is None or s == source)

    def merge(self, other: IngestReport) -> None:
        self.counts.update(other.counts)
        self.skipped.update(other.skipped)
        self.notes.extend(other.notes)


Adapter = Callable[..., Iterator[Example]]

ADAPTERS: Registry[Adapter] = Registry("source")


def load_adapters() -> Registry[Adapter]:
    """Import every adapter module (each registers itself) and return the registry."""
    import_modules(__name__, {"bfcl_common"})
    return ADAPTERS


def read_source(name: str, location: str, report: IngestReport | None = None, **options: Any) -> list[Example]:
    """All examples of one source (a convenience over the registry)."""
    report = report if report is not None else IngestReport()
    adapter = load_adapters().get(name)
    out = []
    for ex in adapter(location, report, **options):
        report.add(ex)
        out.append(ex)
    return out
