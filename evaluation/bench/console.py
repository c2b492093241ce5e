"""How fast the operator's console renders over a large decision log: a synthetic log, then each view's whole page.

    switchcraft bench console [--requests 1000000] [--days 30] [--out runs/bench_console.md]
    switchcraft bench console --requests 20000 --screenshots docs/img     # + PNGs of Savings and Quality

The log is written by the gateway's own writer (serving/core/decision_log.py `DecisionLog.write`: the rows and
the per-hour summary, in batches), in the schema the gateway writes, with what `log.requests: false` keeps (no
request text). Traffic: `--requests` requests spread evenly over the last `--days` days, five keys, a router
reload two thirds of the way through, 80% single-model requests (cheaper models more often), 20% agreement
cascades (the two first answers compared; a disagreement escalates), 1.5% upstream errors, token counts and latencies drawn per model,
costs at the pool's prices, and `--explore` of the answered requests explored (every other pool model answers;
each model right with its own probability, wrong answers drawn from a few spellings, so consensus has something
to do). The same `--seed` writes the same log.

Then the console is served by the real gateway app (serving/app.py `create_app`, an admin key's session
cookie, pages fetched over HTTP in process with Starlette's TestClient) and every view's page is timed for each
range: the median of `--repeat` GETs (the slowest is in the .json). Writes a markdown table and the same numbers
as .json. `--screenshots DIR` also opens the Savings and Quality pages in headless Chromium
(evaluation/harness.py) and keeps `console_savings.png` and `console_quality.png` there.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from serving.core.decision_log import DecisionLog

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("decisions*.sqlite*"):
        old.unlink()
    log = DecisionLog(folder, max_mb=1e9)  # one file: the bench times the queries, not rotation
    log.db.execute("PRAGMA cache_size = -262144")  # 256 MiB: random request ids make index inserts page-bound
    written = 0
    with Progress(TextColumn("writing the log"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  disable=not progress) as bar:
        task = bar.add_task("log", total=n)
        for batch in synthetic_records(pool, n, days, now=now, explore=explore, seed=seed):
            log.write(batch)
            step = sum(1 for kind, _, _ in batch if kind == "request")
            written += step
            bar.advance(task, step)
    counts = {t: log.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("requests", "answers", "summary")}
    log.db.close()
    return counts


def _gateway_app(cfg: ConsoleBenchConfig, pool, log_dir: Path, state_dir: Path):
    from serving.client import RouterClient
    from serving.app import create_app
    from serving.core.auth import KeyStore
    from serving.gateway.config import ServingConfig

    for m in pool.models:  # the console never calls an upstream: a placeholder secret is enough to start
        os.environ.setdefault(m.api_key_env, "bench-console-unused")
    scfg = ServingConfig(log={"path": str(log_dir)}, state={"path": str(state_dir)},
                         explore={"rate": cfg.explore, "usd_per_day": 50.0})
    keys = KeyStore.from_settings(scfg.auth, pool.names, environ={
        scfg.auth.keys_env: json.dumps([{"id": "bench-admin", "key": ADMIN_KEY, "role": "admin"}])})
    client = RouterClient.from_dir(cfg.router_dir, threads=1)
    return create_app(scfg, client=client, pool=pool, keys=keys)


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


def range_requests(log_dir: Path, ranges: tuple[str, ...], now: float) -> dict[str, int]:
    from serving.console.logdb import open_log, since_of

    out = {}
    for r in ranges:
        with open_log(log_dir, since_of(r, now)) as db:
            out[r] = db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
    return out


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def run_console_bench(cfg: ConsoleBenchConfig, progress: bool = True) -> dict[str, Any]:
    from data.pool import load_pool

    pool = load_pool(cfg.pool)
    if not (cfg.router_dir / "router.json").exists():
        raise FileNotFoundError(f"{cfg.router_dir}: no router.json; export one first: switchcraft export "
                                f"runs/bfcl_v1/router --out {cfg.router_dir}")
    log_dir = cfg.log_dir or cfg.out.with_name(cfg.out.stem + "_log")
    now = time.time()
    t0 = time.perf_counter()
    counts = write_log(log_dir, pool, cfg.requests, cfg.days, now=now, explore=cfg.explore, seed=cfg.seed,
                       progress=progress)
    written_s = time.perf_counter() - t0
    state_dir = log_dir.parent / (log_dir.name + "_state")
    app = _gateway_app(cfg, pool, log_dir, state_dir)
    load_before = load_average()
    rows = time_pages(app, cfg.ranges, cfg.repeat)
    result = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
              "log": {**counts, "dir": str(log_dir), "write_s": round(written_s, 1),
                      "bytes": sum(p.stat().st_size for p in log_dir.glob("decisions*.sqlite*"))},
              "in_range": range_requests(log_dir, cfg.ranges, now), "rows": rows,
              "load_average": {"before": load_before, "after": load_average()}, "cpus": os.cpu_count()}
    if cfg.screenshots is not None:
        # a fresh app: the timed one's lifespan ended with its test client, closing its state store
        result["screenshots"] = screenshots(_gateway_app(cfg, pool, log_dir, state_dir), cfg.screenshots)
    return result


def screenshots(app, folder: Path) -> list[str] | str:
    """PNGs of the Savings and Quality pages (7 days) in headless Chromium, 1440 px wide; a message where there is none."""
    from evaluation.harness import Browser, browser_missing
    from evaluation.harness import Loopback

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
                path = folder / f"console_{view}.png"
                browser.screenshot(path)
                written.append(str(path))
        finally:
            browser.close()
    return written


def to_markdown(result: dict[str, Any]) -> str:
    ranges = list(dict.fromkeys(r["range"] for r in result["rows"]))
    cell = {(r["range"], r["view"]): r["median_s"] for r in result["rows"]}
    log = result["log"]
    lines = [f"Console page render, {log['requests']:,} logged requests ({log['answers']:,} answers, "
             f"{log['summary']:,} summary rows) over {result['config']['days']:g} days; median of "
             f"{result['config']['repeat']} GETs per page, seconds:", "",
             "| range (requests in it) | " + " | ".join(v.capitalize() for v in VIEWS) + " |",
             "|---|" + "---:|" * len(VIEWS)]
    for r in ranges:
        lines.append(f"| {r} ({result['in_range'][r]:,}) | " + " | ".join(f"{cell[(r, v)]:.2f}" for v in VIEWS)
                     + " |")
    load = result["load_average"]
    lines += ["", f"Load average (1, 5, 15 min) before timing: {load['before']}, after: {load['after']}; "
              f"{result['cpus']} CPUs. Log written in {log['write_s']} s ({log['bytes'] / 2**20:,.0f} MiB)."]
    lines += [f"Note: {n}" for n in result["config"].get("notes") or []]
    return "\n".join(lines) + "\n"


def write_results(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_markdown(result))
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))


def main(requests: int = 1_000_000, days: float = 30.0, out: Path = Path("runs/bench_console.md"),
         log_dir: Path | None = None, router: Path = Path("runs/bfcl_v1/router_onnx"),
         pool: Path = Path("configs/pool.yaml"), explore: float = 0.01, repeat: int = 3, seed: int = 0,
         screenshots: Path | None = None, note: list[str] = []) -> None:  # noqa: B006
    """The console's page render times over a synthetic decision log of --requests requests (written through the
    gateway's log writer, to --log-dir, default <out>_log/): each view for 24h, 7d and all, markdown + .json;
    --screenshots DIR keeps PNGs of Savings and Quality taken in headless Chromium."""
    cfg = ConsoleBenchConfig(requests=requests, days=days, out=out, log_dir=log_dir, router_dir=router, pool=pool,
                             explore=explore, repeat=repeat, seed=seed, screenshots=screenshots, notes=list(note))
    try:
        result = run_console_bench(cfg)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from e
    write_results(result, out)
    print(to_markdown(result))
    shots = result.get("screenshots")
    if isinstance(shots, str):
        print(f"no screenshots: {shots}")
    elif shots:
        print("screenshots: " + ", ".join(shots))
    print(f"wrote {out} and {out.with_suffix('.json')}")
