"""`switchcraft traffic report`: what the operator's console shows, written as files (no browser).

    switchcraft traffic report --log runs/gateway/log --out runs/traffic
    switchcraft traffic report --log runs/gateway/log --state runs/gateway --out runs/traffic --range 7d \
        --reference gpt-4o-2024-05-13 --keys configs/gateway_keys.yaml

Writes report.md, traffic.json and one chart per view (.svg and .png) into --out; prints the headline figures.
The numbers come from serving/console/queries.py, the functions the console's pages call.

Wiring: `register(app)` adds the `traffic` group and its `report` command.
"""

from __future__ import annotations

from pathlib import Path

import typer

from switchcraft.console import console, fail


def register(app: typer.Typer) -> None:
    traffic_app = typer.Typer(help="The gateway's traffic, savings and quality from its decision log.",
                              no_args_is_help=True)
    traffic_app.command("report", help="Write the console's figures (markdown, JSON, SVG and PNG charts) "
                                       "for a decision log.")(report)
    app.add_typer(traffic_app, name="traffic")


def report(
    log: Path = typer.Option(..., "--log", help="The decision log folder (the gateway's log.path)."),
    out: Path = typer.Option(..., "--out", help="Folder the report is written into."),
    state_path: str = typer.Option(None, "--state", help="A state.path folder: adds spend per key (the ledger)."),
    redis_url: str = typer.Option(None, "--redis", help="A Redis URL holding the ledger (instead of --state)."),
    pool: Path = typer.Option(Path("configs/pool.yaml"), "--pool", help="The pool the gateway serves (prices)."),
    range_name: str = typer.Option("all", "--range", help="1h | 24h | 7d | 30d | all (UTC, back from now)."),
    reference: str = typer.Option(None, "--reference", help="The pool model savings are measured against "
                                  "(default: the one with the highest output price)."),
    keys: Path = typer.Option(None, "--keys", help="A gateway key file (auth.keys_file): shows each key's limit."),
    png: bool = typer.Option(True, "--png/--no-png", help="Also draw each chart as PNG (matplotlib)."),
) -> None:
    from data.errors import DataError
    from data.pool import load_pool
    from serving.console.report import traffic_report
    from serving.gateway.config import StateSettings
    from serving.gateway.state import StateUnavailable

    try:
        the_pool = load_pool(pool)
        if reference is not None:
            the_pool.get(reference)
        limits = None
        if keys is not None:
            from serving.gateway.auth import read_key_file

            limits = {e.id: e.limits.usd_per_day for e in read_key_file(keys)}
        state = None
        if state_path or redis_url:
            if redis_url is None and not (Path(state_path) / "state.sqlite").exists():
                fail(f"--state {state_path}: no state.sqlite there (the gateway's state.path folder)")
            state = StateSettings(path=state_path, redis_url=redis_url)
        n = traffic_report(log, out, pool=the_pool, state=state, range_name=range_name, reference=reference,
                           limits=limits, png=png)
    except (DataError, FileNotFoundError, KeyError, ValueError, StateUnavailable) as e:
        fail(str(e).strip('"'))
    s, q = n["savings"], n["quality"]["served"]
    console.print(f"{n['traffic']['requests']} requests; spent ${s['spent_usd']:.6f}; all to "
                  f"{s['reference']['model']} ${s['reference_usd']:.6f} (estimate); saved ${s['saved_usd']:.6f}",
                  highlight=False)
    if q["n"]:
        console.print(f"served answers right (consensus): {q['mean']:.3f} [{q['low']:.3f}, {q['high']:.3f}], "
                      f"n = {q['n']}", highlight=False)
    console.print(f"wrote {out / 'report.md'}", highlight=False)
