"""Rich tables the commands share."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.table import Table


def print_by_reason(console: Console, title: str, key: str, counts: Mapping[tuple[str, str], int]) -> None:
    """Rows left out, counted per (`key`, reason): never silently dropped. Prints nothing when none were."""
    if not counts:
        return
    table = Table(title=title)
    for col in (key, "reason", "rows"):
        table.add_column(col)
    for (k, reason), n in sorted(counts.items()):
        table.add_row(k, reason, f"{n:,}")
    console.print(table)
