"""One progress bar per model, with what it has cost so far (rich; silent off a terminal).

.venv/bin/python -m pytest -q tests/data/pool_runner/test_units.py
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class PoolProgress:
    def __init__(
        self, totals: dict[str, int], *, enabled: bool | None = None, console: Console | None = None
    ) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._spent = dict.fromkeys(totals, 0.0)
        self._progress = Progress(
            TextColumn("{task.description:<34}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("${task.fields[spent]:.4f}"),
            TextColumn("[red]{task.fields[failed]} failed[/]"),
            TimeElapsedColumn(),
            disable=not self.enabled,
            console=console or Console(stderr=True),
        )
        self._tasks = {
            m: self._progress.add_task(m, total=n, spent=0.0, failed=0) for m, n in totals.items()
        }
        self._failed = dict.fromkeys(totals, 0)

    def __enter__(self) -> PoolProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def done(self, model: str, cost_usd: float | None) -> None:
        self._spent[model] += cost_usd or 0.0
        self._progress.update(self._tasks[model], advance=1, spent=self._spent[model])

    def failed(self, model: str) -> None:
        self._failed[model] += 1
        self._progress.update(self._tasks[model], failed=self._failed[model])
