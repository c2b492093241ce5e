"""The gateway as a fleet: one gateway of 1, 2 and 4 workers and two replicas, named and routed, the decision log on
SQLite and on PostgreSQL, each row against the same upstream called directly at the same concurrency.

    switchcraft bench gateway --fleet --router runs/tiny_router_onnx -n 300 -c 16
    switchcraft bench gateway --fleet --shapes 1x1,2x1 --log postgres -n 300 -c 16     # some rows again

A shape RxW is R gateway processes (replicas, each `switchcraft serve` on a port of its own) of W workers each
(`--workers W`: one port, uvicorn's supervisor). No load balancer runs here: the load generator sends request i to
replica i mod R. State is one Redis for every row (each gateway process's limits, spend and ledger), so rows differ
only in shape and log. Each shape × log is a fresh stack (replay upstreams, Redis, the log: a SQLite folder per
replica, or a fresh database on one PostgreSQL server) measured in turn: the upstream directly (the body the gateway
would send the pool's cheapest native model), then the gateway with that model named, then routed (the router runs,
the strategy pinned to that model); each after an unmeasured warm-up at the same concurrency. Method and figures:
docs/performance.md.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from data.pool import PoolModel
from evaluation.bench._support import config_record, md_table, percentiles, write_outputs
from evaluation.bench.gateway import PROVIDER_KEY, GatewayBenchConfig, LoopbackConfig, Stack, scrape
from evaluation.bench.overhead import bodies_for, drive, measured_model
from serving.gateway.breaker import endpoint_of

SHAPES = "1x1,1x2,1x4,2x1"  # one gateway of 1, 2 and 4 workers; two replicas of one worker each
LOGS = ("sqlite", "postgres")
MODES = ("direct", "named", "routed")
LOGGED = "switchcraft_decision_log_records_total"
LOG_WAIT_S = 30.0  # the log writes in the background: how long a row waits for its records to be counted


@dataclass(frozen=True)
class Shape:
    replicas: int  # gateway processes, each on its own port
    workers: int  # worker processes of each (one port)

    @property
    def label(self) -> str:
        """'1 worker', '4 workers' (one gateway), '2 replicas' (of one worker each), '2 replicas × 2 workers'."""
        workers = f"{self.workers} worker{'s' * (self.workers > 1)}"
        if self.replicas == 1:
            return workers
        return f"{self.replicas} replicas" + (f" × {workers}" if self.workers > 1 else "")


def parse_shapes(text: str) -> list[Shape]:
    """'1x1,1x2,2x1' → shapes (replicas x workers), each count within [1, 8]."""
    shapes = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = re.fullmatch(r"([0-9]+)x([0-9]+)", part)
        if m is None or not (1 <= int(m[1]) <= 8 and 1 <= int(m[2]) <= 8):
            raise ValueError(f"--shapes {text!r}: {part!r} is not RxW (R replicas of W workers each, both within "
                             f"[1, 8]), e.g. {SHAPES}")
        shapes.append(Shape(int(m[1]), int(m[2])))
    if not shapes:
        raise ValueError(f"--shapes {text!r}: no shape; e.g. {SHAPES}")
    return list(dict.fromkeys(shapes))


@dataclass
class FleetConfig(LoopbackConfig):
    shapes: list[Shape] = field(default_factory=lambda: parse_shapes(SHAPES))
    logs: list[str] = field(default_factory=lambda: list(LOGS))
    requests: int = 300  # measured a row
    concurrency: int = 16
    warmup: int = 32  # unmeasured, before each row, at the same concurrency (it reaches every worker)
    overrides: list[str] = field(default_factory=list)  # serving config key=value for every gateway

    def __post_init__(self) -> None:
        unknown = [log for log in self.logs if log not in LOGS]
        if unknown or not self.logs:
            raise ValueError(f"--log {','.join(unknown)!r}: with --fleet, a comma list of sqlite and postgres")
        if not self.shapes:
            raise ValueError(f"--shapes: at least one, e.g. {SHAPES}")
        if not 10 <= self.requests <= 10_000:
            raise ValueError("--requests must be within [10, 10000] (the bench is bounded)")
        if not 1 <= self.concurrency <= 256:
            raise ValueError("--concurrency must be within [1, 256]")
        if not 0 <= self.warmup <= 1_000:
            raise ValueError("the warm-up must be within [0, 1000] requests")


Progress = Callable[[str, int, int], None]  # (what is measured now, rows done, rows in all)


def run_fleet(cfg: FleetConfig, progress: Progress | None = None, postgres=None) -> dict:
    """Every shape × log, each a stack of its own; `postgres`: a running LocalPostgres (default: one started for
    the run, a fresh database a stack)."""
    stacks = [(shape, log) for shape in cfg.shapes for log in cfg.logs]
    say, total = progress or (lambda what, done, total: None), len(stacks) * len(MODES)
    cells, model, own = [], None, None
    if "postgres" in cfg.logs and postgres is None:
        from evaluation.harness import LocalPostgres

        say("starting PostgreSQL", 0, total)
        postgres = own = LocalPostgres()
        postgres.start()
    try:
        for k, (shape, log) in enumerate(stacks):
            step = partial(_report, say, f"{shape.label}, log on {log}", k * len(MODES), total)
            step("starting", 0)
            gw = GatewayBenchConfig(router_dir=cfg.router_dir, data_root=cfg.data_root, pool=cfg.pool,
                                    request_timeout_s=cfg.request_timeout_s, requests=cfg.warmup + cfg.requests,
                                    concurrency=cfg.concurrency, processes=shape.replicas, workers=shape.workers,
                                    state="redis", log=log, overrides=cfg.overrides)
            with Stack(gw, postgres=postgres) as stack:
                model = measured_model(stack)
                cells += measure_stack(stack, cfg, model, shape, log, step)
    finally:
        if own is not None:
            own.stop()
    say("done", total, total)
    return {"model": model.name, "config": config_record(cfg), "cpus": os.cpu_count(), "cells": cells,
            "rows": compare(cells)}


def _report(say: Progress, prefix: str, done: int, total: int, what: str, i: int) -> None:
    say(f"{prefix}: {what}", done + i, total)


def measure_stack(stack: Stack, cfg: FleetConfig, model: PoolModel, shape: Shape, log: str,
                  say: Callable[[str, int], None]) -> list[dict]:
    """The direct, named and routed cells of one running stack, in that order."""
    bodies = bodies_for(stack, model)
    upstream = stack.servers[endpoint_of(model.base_url)].base_url.rstrip("/") + "/chat/completions"
    gateway = ([u + "/v1/chat/completions" for u in stack.urls], {"authorization": f"Bearer {stack.key}"})
    targets = {"direct": ([upstream], {"authorization": f"Bearer {PROVIDER_KEY}"}), "named": gateway,
               "routed": gateway}
    cells, logged = [], logged_records(stack)
    for i, (mode, (urls, headers)) in enumerate(targets.items()):
        say(mode, i)
        load = os.getloadavg()[0]
        asyncio.run(drive(urls, bodies[mode][:cfg.warmup], cfg.concurrency, headers, cfg.request_timeout_s, 0))
        lat, failed, wall = asyncio.run(drive(urls, bodies[mode][cfg.warmup:], cfg.concurrency, headers,
                                              cfg.request_timeout_s, 0))
        cell = {"shape": shape.label, "replicas": shape.replicas, "workers": shape.workers, "log": log, "mode": mode,
                "concurrency": cfg.concurrency, "ok": len(lat), "failed": failed, "load_1m": round(load, 2),
                **(percentiles(lat) if lat else {"p50_ms": float("nan"), "p99_ms": float("nan")}),
                "rps": len(lat) / wall if wall else 0.0}
        if mode != "direct":  # what the gateways wrote to the log for this cell, warm-up included
            sent = cfg.warmup + cfg.requests
            now = wait_logged(stack, logged + sent)
            cell.update(sent=sent, logged=now - logged)
            logged = now
        cells.append(cell)
    return cells


def logged_records(stack: Stack) -> int:
    """Decision-log records written so far, summed over the stack's gateway processes (and their workers)."""
    return int(sum(scrape(url, stack.key).get(LOGGED, 0.0) for url in stack.urls))


def wait_logged(stack: Stack, expected: int, timeout_s: float = LOG_WAIT_S) -> int:
    """The records written once `expected` are (or, after `timeout_s`, however many are)."""
    deadline = time.monotonic() + timeout_s
    while (now := logged_records(stack)) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def compare(cells: list[dict]) -> list[dict]:
    """One row per gateway cell, beside the direct cell of its own stack: added = gateway − direct, per percentile."""
    rows, direct = [], None
    for c in cells:
        if c["mode"] == "direct":
            direct = c
            continue
        rows.append({**c, "direct_rps": direct["rps"], "direct_p50_ms": direct["p50_ms"],
                     "direct_p99_ms": direct["p99_ms"], "added_p50_ms": c["p50_ms"] - direct["p50_ms"],
                     "added_p99_ms": c["p99_ms"] - direct["p99_ms"],
                     "throughput_share": c["rps"] / direct["rps"] if direct["rps"] else float("nan")})
    return rows


HEAD = ["gateway", "log", "mode", "req/s", "P50 / P99 ms", "added P50 / P99 ms", "direct req/s", "direct P50 / P99 ms",
        "failed", "logged / sent", "load"]
ALIGN = "lllrrrrrrrr"


def table_rows(result: dict) -> list[list[str]]:
    """The table's cells as text (the markdown table's and the terminal's)."""
    return [[r["shape"], {"sqlite": "SQLite", "postgres": "PostgreSQL"}[r["log"]], r["mode"], f"{r['rps']:.0f}",
             f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f}", f"{r['added_p50_ms']:+.1f} / {r['added_p99_ms']:+.1f}",
             f"{r['direct_rps']:.0f}", f"{r['direct_p50_ms']:.1f} / {r['direct_p99_ms']:.1f}", str(r["failed"]),
             f"{r['logged']} / {r['sent']}", f"{r['load_1m']:.1f}"] for r in result["rows"]]


def title(result: dict) -> str:
    c = result["config"]
    return (f"`switchcraft bench gateway --fleet` — upstream: the replay server answering as {result['model']}; "
            f"{c['requests']} requests a row at concurrency {c['concurrency']} after {c['warmup']} unmeasured; state "
            f"in one Redis; replicas: the load generator sends request i to replica i mod R (no load balancer); "
            f"{result['cpus']} CPUs shared by the gateways, the load generator and the replay upstreams")


def to_markdown(result: dict) -> str:
    return "\n".join([title(result), "", *md_table(HEAD, table_rows(result), ALIGN), "",
                      "added = the gateway's percentile less the direct one, both measured in the same stack, one "
                      "after the other; load: the 1-minute load average as the row started."])


def write_results(result: dict, out: Path) -> None:
    write_outputs(out, to_markdown(result), result)
