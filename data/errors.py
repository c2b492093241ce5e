"""Errors about input data that say where the problem is and what would fix it."""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """Bad input: names the file, the line (1-based) and the field when known."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.message = message
        self.hint = hint
        where = self.path or "<input>"
        if line is not None:
            where += f":{line}"
        if field:
            where += f": field {field!r}"
        text = f"{where}: {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class SourceUnavailable(DataError):
    """A source's files are not here (not given, or not vendored). `ingest --all`
    reports it and goes on; ingesting that source alone fails with this message."""
