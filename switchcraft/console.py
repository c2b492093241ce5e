"""What every `switchcraft` command prints through: the console (stdout), `err` (stderr) and `fail`.

The command modules (`cli_*.py`) import these from here, never from `switchcraft.cli`: `cli.py` imports the
command modules to register them, so importing back from it would make a circle.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=False)
err = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on stderr and leave the command with exit status `code`.

    The message is printed as written (brackets in it are not read as markup) and is not cut at the terminal's
    width, so a path or a command in it stays whole when stderr goes to a file."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
