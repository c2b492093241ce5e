"""CLI commands for this area; `register(app)` adds them to the `switchcraft` command."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app (filled in by the work on this area)."""
