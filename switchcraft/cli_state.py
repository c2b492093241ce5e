"""`switchcraft spend`: the gateway's ledger, read from its state store (SQLite file or Redis).

    switchcraft spend                                   # the store configs/serving.yaml names, every key, every day
    switchcraft spend --key acme-support --day 2026-12-01
    switchcraft spend --redis redis://10.0.0.5:6379/0 --json
    switchcraft spend --state runs/gateway               # a state.path folder (its state.sqlite)

Wiring: `register(app)` adds `spend`.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from switchcraft.console import console, fail


def register(app: typer.Typer) -> None:
    app.command("spend", help="The gateway's spend ledger: every charge per key, model, UTC day and kind.")(spend)


def spend(
    key: str = typer.Option(None, "--key", help="One API key id (default: every key)."),
    day: str = typer.Option(None, "--day", help="One UTC day, YYYY-MM-DD (default: every day)."),
    config: Path = typer.Option(Path("configs/serving.yaml"), "--config", "-c", help="Serving config naming the store."),
    state_path: str = typer.Option(None, "--state", help="A state.path folder (overrides the config)."),
    redis_url: str = typer.Option(None, "--redis", help="A Redis URL (overrides the config)."),
    rows: bool = typer.Option(False, "--rows", help="Also print every ledger row."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Totals per key and day (by kind: answer, cascade, abandoned, estimated, expired, explore), from the store."""
    from serving.core.budget import spend_report
    from serving.core.state import StateSettings
    from serving.gateway.config import load_serving_config
    from serving.core.state import StateUnavailable, open_state

    if day is not None and not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", day):
        fail(f"--day {day!r}: give a UTC date as YYYY-MM-DD")
    if redis_url or state_path:
        settings = StateSettings(path=state_path, redis_url=redis_url)
    else:
        try:
            settings = load_serving_config(config).state
        except (OSError, ValueError) as e:
            fail(str(e))
        if settings.path is None and settings.redis_url is None:
            fail(f"{config}: state.path and state.redis_url are both null (the gateway keeps spend in memory); "
                  "pass --state FOLDER or --redis URL")
    if settings.redis_url is None and not (Path(settings.path) / "state.sqlite").exists():
        fail(f"no ledger at {Path(settings.path) / 'state.sqlite'}: has a gateway run with state.path={settings.path}?")

    async def read():
        store = open_state(settings)
        try:
            return await store.ledger(key_id=key, day=day)
        finally:
            await store.aclose()

    try:
        report = spend_report(asyncio.run(read()))
    except StateUnavailable as e:
        fail(str(e))
    if as_json:
        console.print_json(json.dumps(report))
        return
    if not report["totals"]:
        console.print("no charges" + (f" for key {key}" if key else "") + (f" on {day}" if day else ""))
        return
    from serving.core.state import KINDS as kinds

    table = Table(title="spend (USD)")
    for col in ("day", "key", "calls", "total", *kinds):
        table.add_column(col, justify="left" if col in ("day", "key") else "right")
    for t in report["totals"]:
        table.add_row(t["day"], t["key"], str(t["calls"]), f"{t['usd']:.6f}",
                      *(f"{t['by_kind'].get(k, 0.0):.6f}" for k in kinds))
    wide = Console(width=max(console.width, 150))  # ten columns of figures: never cut to a pipe's 80
    wide.print(table)
    if rows:
        detail = Table(title="ledger")
        for col in ("ts", "day", "key", "model", "kind", "usd", "request_id"):
            detail.add_column(col)
        for r in report["rows"]:
            detail.add_row(f"{r['ts']:.3f}", r["day"], r["key"], r["model"], r["kind"], f"{r['usd']:.8f}",
                           r["request_id"])
        wide.print(detail)
