"""`switchcraft traffic report`: what the operator's console shows, written as files (no browser).

    switchcraft traffic report --log runs/gateway/log --out runs/traffic
    switchcraft traffic report --log postgresql://console@db:5432/switchcraft --out runs/traffic   # a fleet's log
    switchcraft traffic report --log runs/gateway/log --state runs/gateway --out runs/traffic --range 7d \
        --reference gpt-4o-2024-05-13 --keys configs/gateway_keys.yaml

Writes report.md, traffic.json and one chart per view (.svg and .png) into --out; prints the headline figures.
The numbers come from serving/console/queries.py, the functions the console's pages call.

Wiring: `register(app)` adds the `traffic` group and its `report` command.
"""

from __future__ import annotations

import json
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
    log: str = typer.Option(..., "--log", help="The decision log: its folder (the gateway's log.path) or its "
                            "PostgreSQL URL (log.url, postgresql://user@host:port/db: every replica's requests)."),
    out: Path = typer.Option(..., "--out", help="Folder the report is written into."),
    state_path: str = typer.Option(None, "--state", help="A state.path folder: adds spend per key (the ledger)."),
    redis_url: str = typer.Option(None, "--redis", help="A Redis URL holding the ledger (instead of --state)."),
    config: Path = typer.Option(Path("configs/serving.yaml"), "--config", help="The gateway's config: the pool it "
                                "serves (upstream.pool) and its router (router.dir, for the reference rule)."),
    pool: Path = typer.Option(None, "--pool", help="Another pool file than the config's upstream.pool (prices)."),
    range_name: str = typer.Option("all", "--range", help="1h | 24h | 7d | 30d | all (UTC, back from now)."),
    reference: str = typer.Option(None, "--reference", help="The pool model savings are measured against "
                                  "(default: the served pool's best single model; docs/console.md)."),
    keys: Path = typer.Option(None, "--keys", help="A gateway key file (auth.keys_file): shows each key's limit."),
    png: bool = typer.Option(True, "--png/--no-png", help="Also draw each chart as PNG (matplotlib)."),
) -> None:
    from data.errors import DataError
    from data.logged import is_log_url
    from data.pool import load_pool
    from serving.console.headline import money, share_text
    from serving.console.report import traffic_report
    from serving.core.state import StateSettings
    from serving.gateway.config import load_serving_config
    from serving.core.state import StateUnavailable

    try:
        cfg = load_serving_config(config)
        the_pool = load_pool(pool or cfg.upstream.pool)
        info = Path(cfg.router.dir) / "router.json" if cfg.router.dir else None
        router_info = json.loads(info.read_text()) if info is not None and info.is_file() else None
        if reference is not None:
            the_pool.get(reference)
        limits = None
        if keys is not None:
            from serving.core.auth import read_key_file

            limits = {e.id: e.limits.usd_per_day for e in read_key_file(keys)}
        state = None
        if state_path or redis_url:
            if redis_url is None and not (Path(state_path) / "state.sqlite").exists():
                fail(f"--state {state_path}: no state.sqlite there (the gateway's state.path folder)")
            state = StateSettings(path=state_path, redis_url=redis_url)
        n = traffic_report(log if is_log_url(log) else Path(log), out, pool=the_pool, state=state, range_name=range_name, reference=reference,
                           limits=limits, png=png, router_info=router_info)
    except (DataError, FileNotFoundError, ConnectionError, KeyError, ValueError, StateUnavailable) as e:
        fail(str(e).strip('"'))
    s, q = n["savings"], n["quality"]["served"]
    console.print(f"{n['traffic']['requests']} requests; spent {money(s['spent_usd'])} + exploration "
                  f"{money(s['explore_usd'])}; all to {s['reference']['model']} ({s['reference_rule']}) "
                  f"{money(s['reference_usd'])} (estimate); saved {share_text(s)}", highlight=False)
    if q["n"]:
        console.print(f"served answers right (consensus): {q['mean']:.3f} [{q['low']:.3f}, {q['high']:.3f}], "
                      f"n = {q['n']}", highlight=False)
    console.print(f"wrote {out / 'report.md'}", highlight=False)
