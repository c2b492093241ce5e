"""How fast the operator's console renders over a large decision log: a synthetic log (evaluation/synthetic_log.py,
through the gateway's writer), then each view's whole page for each range, through the gateway's own app.

    switchcraft bench console [--requests 1000000] [--days 30] [--out runs/bench_console.md] [--screenshots docs/img]
    switchcraft bench console --requests 100000 --days 7 --log postgres    # the same log in a throwaway PostgreSQL

Method and figures: docs/console.md ("Large logs"), docs/performance.md.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.bench._support import config_record, md_table, write_outputs
from evaluation.synthetic_log import write_log

VIEWS = ("savings", "quality", "traffic", "keys", "requests", "router")
RANGES = ("24h", "7d", "all")
ADMIN_KEY = "sk-sc-bench-console-admin-0123456789"


@dataclass
class ConsoleBenchConfig:
    requests: int = 1_000_000
    days: float = 30.0
    out: Path = Path("runs/bench_console.md")
    log_dir: Path | None = None  # default: <out without suffix>_log/
    router_dir: Path = Path("runs/bfcl_v1/router_onnx")
    pool: Path = Path("configs/pool.yaml")
    explore: float = 0.01
    repeat: int = 3
    seed: int = 0
    screenshots: Path | None = None
    ranges: tuple[str, ...] = RANGES
    log: str = "sqlite"  # or "postgres": the log in a throwaway PostgreSQL server (evaluation/harness.py)
    notes: list[str] = field(default_factory=list)


def _gateway_app(cfg: ConsoleBenchConfig, pool, log_dir: Path | str, state_dir: Path):
    from serving.app import create_app
    from serving.client import RouterClient
    from serving.core.auth import KeyStore
    from serving.gateway.config import ServingConfig

    for m in pool.models:  # the console never calls an upstream: a placeholder secret is enough to start
        os.environ.setdefault(m.api_key_env, "bench-console-unused")
    log = {"path": None, "url": log_dir} if isinstance(log_dir, str) else {"path": str(log_dir)}
    scfg = ServingConfig(log=log, state={"path": str(state_dir)},
                         explore={"rate": cfg.explore, "usd_per_day": 50.0})
    keys = KeyStore.from_settings(scfg.auth, pool.names, environ={
        scfg.auth.keys_env: json.dumps([{"id": "bench-admin", "key": ADMIN_KEY, "role": "admin"}])})
    return create_app(scfg, client=RouterClient.from_dir(cfg.router_dir, threads=1), pool=pool, keys=keys)


def time_pages(app, ranges: tuple[str, ...], repeat: int) -> list[dict[str, Any]]:
    """Each view's page for each range, `repeat` GETs each, through the app with an admin session."""
    from fastapi.testclient import TestClient

    rows = []
    with TestClient(app) as http:
        r = http.post("/console/login", data={"key": ADMIN_KEY, "next": "/console/savings"}, follow_redirects=False)
        if r.status_code != 303:
            raise RuntimeError(f"console login answered {r.status_code}: {r.text[:300]}")
        for range_name in ranges:
            for view in VIEWS:
                times = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    page = http.get(f"/console/{view}?range={range_name}")
                    times.append(time.perf_counter() - t0)
                    if page.status_code != 200:
                        raise RuntimeError(f"/console/{view}?range={range_name} answered {page.status_code}: "
                                           f"{page.text[:300]}")
                rows.append({"range": range_name, "view": view, "median_s": statistics.median(times),
                             "max_s": max(times), "bytes": len(page.content)})
    return rows


def run_console_bench(cfg: ConsoleBenchConfig, progress: bool = True) -> dict[str, Any]:
    if cfg.log not in ("sqlite", "postgres"):
        raise ValueError(f"--log {cfg.log!r}: give sqlite or postgres")
    if not (cfg.router_dir / "router.json").exists():
        raise FileNotFoundError(f"{cfg.router_dir}: no router.json; export one first: switchcraft export "
                                f"runs/bfcl_v1/router --out {cfg.router_dir}")
    log_dir = cfg.log_dir or cfg.out.with_name(cfg.out.stem + "_log")
    if cfg.log == "sqlite":
        return _run(cfg, log_dir, log_dir.parent / (log_dir.name + "_state"), progress)
    from evaluation.harness import LocalPostgres, postgres_missing

    if missing := postgres_missing():
        raise FileNotFoundError(f"--log postgres: {missing}")
    with LocalPostgres() as pg:
        return _run(cfg, pg.create_database("console_bench"), log_dir.parent / (log_dir.name + "_state"), progress)


def _run(cfg: ConsoleBenchConfig, log: Path | str, state_dir: Path, progress: bool) -> dict[str, Any]:
    from data.pool import load_pool
    from serving.console.logdb import open_log, since_of

    pool = load_pool(cfg.pool)
    now, t0 = time.time(), time.perf_counter()
    counts = write_log(log, pool, cfg.requests, cfg.days, now=now, explore=cfg.explore, seed=cfg.seed,
                       progress=progress)
    written_s, load_before = time.perf_counter() - t0, " ".join(f"{v:.2f}" for v in os.getloadavg())
    rows = time_pages(_gateway_app(cfg, pool, log, state_dir), cfg.ranges, cfg.repeat)
    in_range = {}
    for r in cfg.ranges:
        with open_log(log, since_of(r, now)) as db:
            in_range[r] = db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
    stored = (sum(p.stat().st_size for p in log.glob("decisions*.sqlite*")) if isinstance(log, Path) else None)
    result = {"config": config_record(cfg), "in_range": in_range, "rows": rows, "cpus": os.cpu_count(),
              "log": {**counts, "dir": str(log) if isinstance(log, Path) else "PostgreSQL (throwaway)",
                      "write_s": round(written_s, 1), "bytes": stored},
              "load_average": {"before": load_before, "after": " ".join(f"{v:.2f}" for v in os.getloadavg())}}
    if cfg.screenshots is not None:
        # a fresh app: the timed one's lifespan ended with its test client, closing its state store
        result["screenshots"] = screenshots(_gateway_app(cfg, pool, log, state_dir), cfg.screenshots)
    return result


def screenshots(app, folder: Path) -> list[str] | str:
    """PNGs of the Savings and Quality pages (7 days) in headless Chromium, 1440 px wide; a message where there is
    no browser."""
    from evaluation.harness import Browser, Loopback, browser_missing

    missing = browser_missing()
    if missing:
        return missing
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with Loopback(app) as url, tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        browser = Browser(Path(profile), window=(1440, 1400))
        try:
            browser.open(url + "/console/login?next=/console/savings")
            browser.type("#key", ADMIN_KEY)
            browser.click("#login")
            browser.wait_url(url + "/console/savings")
            for view in ("savings", "quality"):
                browser.open(f"{url}/console/{view}?range=7d")
                browser.screenshot(folder / f"console_{view}.png")
                written.append(str(folder / f"console_{view}.png"))
        finally:
            browser.close()
    return written


def to_markdown(result: dict[str, Any]) -> str:
    cell = {(r["range"], r["view"]): r["median_s"] for r in result["rows"]}
    log, load = result["log"], result["load_average"]
    rows = [[f"{r} ({result['in_range'][r]:,})", *(f"{cell[(r, v)]:.2f}" for v in VIEWS)]
            for r in dict.fromkeys(r["range"] for r in result["rows"])]
    return "\n".join([
        f"Console page render, {log['requests']:,} logged requests ({log['answers']:,} answers, {log['summary']:,} "
        f"summary rows) over {result['config']['days']:g} days; median of {result['config']['repeat']} GETs per page, "
        "seconds:", "", *md_table(["range (requests in it)", *(v.capitalize() for v in VIEWS)], rows, "l" + "r" * len(VIEWS)),
        "", f"Load average (1, 5, 15 min) before timing: {load['before']}, after: {load['after']}; {result['cpus']} "
        f"CPUs. Log ({'SQLite' if log['bytes'] is not None else 'PostgreSQL'}) written in {log['write_s']} s"
        + (f" ({log['bytes'] / 2**20:,.0f} MiB)." if log["bytes"] is not None else "."),
        *(f"Note: {n}" for n in result["config"].get("notes") or [])]) + "\n"


def write_results(result: dict[str, Any], out: Path) -> None:
    write_outputs(out, to_markdown(result), result)

