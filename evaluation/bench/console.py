"""How fast the operator's console renders over a large decision log: a synthetic log, then each view's whole page.

    switchcraft bench console [--requests 1000000] [--days 30] [--out runs/bench_console.md]
    switchcraft bench console --requests 20000 --screenshots docs/img     # + PNGs of Savings and Quality

The log is written by the gateway's own writer (serving/core/decision_log.py) from `synthetic_records` (the same
`--seed`, the same log); the real gateway app serves the console and every view's page is timed for each range,
the median of `--repeat` GETs. `--screenshots DIR` keeps the Savings and Quality pages taken in headless Chromium.
Method and figures: docs/console.md ("Large logs").
"""

from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.bench._support import config_record, md_table, write_outputs

VIEWS = ("savings", "quality", "traffic", "keys", "requests", "router")
RANGES = ("24h", "7d", "all")
KEYS = (("acme-prod", 0.45), ("acme-staging", 0.1), ("beta", 0.25), ("gamma-batch", 0.15), ("ops", 0.05))
ADMIN_KEY = "sk-sc-bench-console-admin-0123456789"
CITIES = ("Paris", "Berlin", "Lisbon", "Osaka", "Lima", "Cairo", "Oslo", "Quito")


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
    notes: list[str] = field(default_factory=list)


def _prices(model) -> tuple[float, float]:
    p = model.prices
    return (p.input_per_mtok or 0.0) / 1e6, (p.output_per_mtok or 0.0) / 1e6


def _disagreement(x: list, y: list) -> str | None:
    """How two synthetic answers differ, in the gateway's words (data/verify/agree.py DISAGREEMENT_KINDS)."""
    if x == y:
        return None
    if not x or not y:
        return "first_declines" if not x else "second_declines"
    return "functions" if x[0]["name"] != y[0]["name"] else "arguments"


def synthetic_records(pool, n: int, days: float, *, now: float, explore: float = 0.01, seed: int = 0,
                      batch: int = 2000):
    """Batches of the writer's records (("request", request row, answer rows), ("answers", None, rows)) for `n`
    requests ending at `now`, in the order the gateway logs them (each when it ends)."""
    rng = random.Random(seed)
    names = pool.names
    by_price = sorted(pool.models, key=lambda m: sum(_prices(m)))
    weights = [1.0 / (1 + i) for i in range(len(by_price))]  # the router picks cheaper models more often
    acc = {m.name: 0.72 + 0.25 * rng.random() for m in pool.models}
    speed = {m.name: rng.uniform(250, 900) for m in pool.models}
    price = {m.name: _prices(m) for m in pool.models}
    top = by_price[-1].name
    keys, key_w = [k for k, _ in KEYS], [w for _, w in KEYS]
    span, out = days * 86400, []

    def answer(rid: str, model: str, role: str, right: list, wrong: list, ok: bool = True) -> dict:
        tin, tout = int(rng.lognormvariate(6.8, 0.5)), int(rng.uniform(15, 90))
        calls = right if rng.random() < acc[model] else rng.choice(wrong)
        cost = tin * price[model][0] + tout * price[model][1] if ok else 0.0
        return {"request_id": rid, "model": model, "role": role, "outcome": "ok" if ok else "http_5xx",
                "latency_ms": rng.lognormvariate(0, 0.35) * speed[model], "cost_usd": cost,
                "input_tokens": tin if ok else None, "output_tokens": tout if ok else None,
                "calls": json.dumps(calls) if ok else None, "raw": None, "decoder": "json" if ok else None,
                "decode_error": None}

    for i in range(n):
        rid = f"{rng.getrandbits(128):032x}"
        city = rng.choice(CITIES)
        right = [{"name": "get_weather", "arguments": {"city": city}}]
        wrong = [[{"name": "get_weather", "arguments": {"city": rng.choice(CITIES)}}],
                 [{"name": "get_forecast", "arguments": {"city": city, "days": 3}}], []]
        cascade = rng.random() < 0.2
        failed = rng.random() < 0.015
        if cascade:
            a, b = rng.sample(names[:-1] if len(names) > 2 else names, 2)
            answers = [answer(rid, a, "first", right, wrong), answer(rid, b, "first", right, wrong)]
            kind = _disagreement(*(json.loads(x["calls"]) for x in answers))
            verdict = "agree" if kind is None else "disagree"
            if verdict == "disagree":
                answers.append(answer(rid, top, "escalate", right, wrong))
            strategy, by = f"agree({a}, {b})>{top}", answers[-1]["model"]
        else:
            by = rng.choices(by_price, weights)[0].name
            answers, verdict, strategy = [answer(rid, by, "first", right, wrong, ok=not failed)], None, f"single({by})"
        status = rng.choice((502, 503, 504)) if failed and not cascade else 200
        latency = sum(a["latency_ms"] or 0 for a in answers) + rng.uniform(2, 12)
        ts = now - span * (1 - (i + 1) / n) - latency / 1e3  # logged when it ends; started `latency` earlier
        request = {"ts": ts, "request_id": rid, "key_id": rng.choices(keys, key_w)[0],
                   "router_version": "bench-v1" if i < 2 * n // 3 else "bench-v2", "kind": "served",
                   "status": status, "example_id": None, "routed": 1, "chosen": by, "rule": "threshold",
                   "strategy": strategy, "verdict": verdict,
                   "kinds": json.dumps([kind] if cascade and kind else []),
                   "answered_by": by if status == 200 else None,
                   "cost_usd": sum(a["cost_usd"] for a in answers) if status == 200 else 0.0,
                   "latency_ms": latency, "stream": int(rng.random() < 0.3), "request": None, "api": "chat",
                   "session": None}
        out.append(("request", request, answers))
        if status == 200 and rng.random() < explore:
            called = {a["model"] for a in answers}
            out.append(("answers", None, [answer(rid, m, "explore", right, wrong) for m in names if m not in called]))
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out


def write_log(folder: Path, pool, n: int, days: float, *, now: float, explore: float, seed: int,
              progress: bool = True) -> dict[str, int]:
    """A synthetic log of `n` requests in `folder` (emptied first), through the gateway's writer."""
    from rich.progress import track

    from serving.core.decision_log import DecisionLog

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("decisions*.sqlite*"):
        old.unlink()
    log = DecisionLog(folder, max_mb=1e9)  # one file: the bench times the queries, not rotation
    log.db.execute("PRAGMA cache_size = -262144")  # 256 MiB: random request ids make index inserts page-bound
    batches = synthetic_records(pool, n, days, now=now, explore=explore, seed=seed)
    for batch in track(batches, "writing the log", disable=not progress):
        log.write(batch)
    counts = {t: log.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("requests", "answers", "summary")}
    log.db.close()
    return counts


def _gateway_app(cfg: ConsoleBenchConfig, pool, log_dir: Path, state_dir: Path):
    from serving.app import create_app
    from serving.client import RouterClient
    from serving.core.auth import KeyStore
    from serving.gateway.config import ServingConfig

    for m in pool.models:  # the console never calls an upstream: a placeholder secret is enough to start
        os.environ.setdefault(m.api_key_env, "bench-console-unused")
    scfg = ServingConfig(log={"path": str(log_dir)}, state={"path": str(state_dir)},
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
    from data.pool import load_pool
    from serving.console.logdb import open_log, since_of

    pool = load_pool(cfg.pool)
    if not (cfg.router_dir / "router.json").exists():
        raise FileNotFoundError(f"{cfg.router_dir}: no router.json; export one first: switchcraft export "
                                f"runs/bfcl_v1/router --out {cfg.router_dir}")
    log_dir = cfg.log_dir or cfg.out.with_name(cfg.out.stem + "_log")
    state_dir = log_dir.parent / (log_dir.name + "_state")
    now, t0 = time.time(), time.perf_counter()
    counts = write_log(log_dir, pool, cfg.requests, cfg.days, now=now, explore=cfg.explore, seed=cfg.seed,
                       progress=progress)
    written_s, load_before = time.perf_counter() - t0, " ".join(f"{v:.2f}" for v in os.getloadavg())
    rows = time_pages(_gateway_app(cfg, pool, log_dir, state_dir), cfg.ranges, cfg.repeat)
    in_range = {}
    for r in cfg.ranges:
        with open_log(log_dir, since_of(r, now)) as db:
            in_range[r] = db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
    result = {"config": config_record(cfg), "in_range": in_range, "rows": rows, "cpus": os.cpu_count(),
              "log": {**counts, "dir": str(log_dir), "write_s": round(written_s, 1),
                      "bytes": sum(p.stat().st_size for p in log_dir.glob("decisions*.sqlite*"))},
              "load_average": {"before": load_before, "after": " ".join(f"{v:.2f}" for v in os.getloadavg())}}
    if cfg.screenshots is not None:
        # a fresh app: the timed one's lifespan ended with its test client, closing its state store
        result["screenshots"] = screenshots(_gateway_app(cfg, pool, log_dir, state_dir), cfg.screenshots)
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
        f"CPUs. Log written in {log['write_s']} s ({log['bytes'] / 2**20:,.0f} MiB).",
        *(f"Note: {n}" for n in result["config"].get("notes") or [])]) + "\n"


def write_results(result: dict[str, Any], out: Path) -> None:
    write_outputs(out, to_markdown(result), result)

