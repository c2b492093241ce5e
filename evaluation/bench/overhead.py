"""What the gateway adds to a request: the same upstream called directly and through the gateway, in one run.

    switchcraft bench overhead --router runs/bfcl_v1/router_onnx [--concurrency 1 --concurrency 16 --concurrency 64]

One replay server per pool endpoint answers with the recorded BFCL v1 outputs (no model latency: what remains is
HTTP, JSON and whatever sits in between). For each concurrency and each state store (memory, SQLite, Redis: the
gateway is restarted per store), the same requests go

- **direct**: to the replay server, with the exact body the gateway would send the model (one native model of
  the pool, the cheapest), over a fresh keep-alive connection pool;
- **named**: through the gateway, `model: <that model>` (routing off: auth, limits, reserve/settle, decode);
- **routed**: through the gateway, `model: "router"` with the strategy pinned to that one model
  (`switchcraft.strategy.first`), so the router runs in process and the upstream work equals the direct call's.

Reported per row: P50/P99 latency, throughput, the P50 the gateway adds (gateway − direct) and its throughput as
a share of direct. Goals: ≤ 5 ms added at P50 with the router in process, ≥ 80% of direct throughput at c = 64.
Everything runs on this machine's cores at once (load generator, replay servers, gateway), so the ratios are
what one box gives, not a datacenter's. Bounded: a fixed number of requests per cell, each with a timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from data.pool import PoolModel
from evaluation.bench.gateway import PROVIDER_KEY, GatewayBenchConfig, Stack, chat_body
from serving.gateway.breaker import endpoint_of

GOAL_ADDED_P50_MS = 5.0
GOAL_THROUGHPUT_SHARE = 0.80
STATES = ("memory", "sqlite", "redis")


@dataclass
class OverheadConfig:
    router_dir: Path
    data_root: Path
    pool: Path = Path("configs/pool.yaml")
    concurrency: list[int] = field(default_factory=lambda: [1, 16, 64])
    states: list[str] = field(default_factory=lambda: list(STATES))
    requests: int = 300  # per cell (a concurrency × a state × a mode); c = 1 sends a third of them
    warmup: int = 20
    request_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.concurrency or any(c < 1 or c > 256 for c in self.concurrency):
            raise ValueError("--concurrency: each level within [1, 256]")
        unknown = [s for s in self.states if s not in STATES]
        if unknown or not self.states:
            raise ValueError(f"--state {unknown}: memory, sqlite or redis")
        if not 10 <= self.requests <= 10_000:
            raise ValueError("--requests must be within [10, 10000] (the bench is bounded)")


@dataclass
class Cell:
    mode: str  # direct | named | routed
    state: str | None  # None for direct
    concurrency: int
    latencies_ms: list[float]
    failed: int
    wall_s: float

    @property
    def p50(self) -> float:
        return float(np.percentile(self.latencies_ms, 50)) if self.latencies_ms else float("nan")

    @property
    def p99(self) -> float:
        return float(np.percentile(self.latencies_ms, 99)) if self.latencies_ms else float("nan")

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.wall_s if self.wall_s else 0.0

    def to_dict(self) -> dict:
        return {"mode": self.mode, "state": self.state, "concurrency": self.concurrency, "ok": len(self.latencies_ms),
                "failed": self.failed, "p50_ms": self.p50, "p99_ms": self.p99, "rps": self.rps}


def measured_model(stack: Stack) -> PoolModel:
    """The pool's cheapest native model: one upstream call whose body the gateway passes nearly as it came."""
    native = [m for m in stack.pool.models if m.prompt_style == "native"]
    if not native:
        raise ValueError("the pool has no native (function-calling) model to measure against")
    return min(native, key=lambda m: (m.prices.input_per_mtok or 0.0) + (m.prices.output_per_mtok or 0.0))


def bodies_for(stack: Stack, model: PoolModel) -> dict[str, list[tuple[str, dict]]]:
    """(url path, body) per mode, one per bench example, in the same order."""
    from serving.gateway.answers import upstream_body
    from serving.gateway.requests import to_schema

    direct, named, routed = [], [], []
    for ex in stack.examples:
        body = chat_body(ex)
        _, tools = to_schema(body["messages"], body["tools"])
        direct.append(upstream_body({**body, "model": model.name}, tools, model))
        named.append({**body, "model": model.name})
        routed.append({**body, "model": "router", "switchcraft": {"strategy": {"first": [model.name]}}})
    return {"direct": direct, "named": named, "routed": routed}


async def drive(url: str, bodies: list[dict], concurrency: int, headers: dict, timeout_s: float,
                warmup: int) -> tuple[list[float], int, float]:
    """Send `bodies` at `concurrency` (after `warmup` unmeasured ones): (latencies of 200s, failures, wall)."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=timeout_s, limits=limits) as http:
        for body in bodies[:warmup]:
            await http.post(url, json=body)
        latencies: list[float] = []
        failed, next_i = 0, warmup

        async def worker() -> None:
            nonlocal failed, next_i
            while next_i < len(bodies):
                i, next_i = next_i, next_i + 1
                t0 = time.perf_counter()
                try:
                    r = await http.post(url, json=bodies[i])
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    latencies.append((time.perf_counter() - t0) * 1e3)
                else:
                    failed += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, failed, time.perf_counter() - started


def run_overhead(cfg: OverheadConfig, progress=None) -> dict:
    cells: list[Cell] = []
    n_max = cfg.requests + cfg.warmup
    model_name = None
    for state in cfg.states:
        stack_cfg = GatewayBenchConfig(router_dir=cfg.router_dir, data_root=cfg.data_root, pool=cfg.pool,
                                       requests=n_max, concurrency=max(cfg.concurrency), state=state,
                                       request_timeout_s=cfg.request_timeout_s)
        with Stack(stack_cfg) as stack:
            model = measured_model(stack)
            model_name = model.name
            bodies = bodies_for(stack, model)
            upstream = stack.servers[endpoint_of(model.base_url)].base_url.rstrip("/") + "/chat/completions"
            for c in cfg.concurrency:
                n = cfg.warmup + (cfg.requests if c > 1 else max(10, cfg.requests // 3))
                modes = [("named", stack.url + "/v1/chat/completions", {"authorization": f"Bearer {stack.key}"}),
                         ("routed", stack.url + "/v1/chat/completions", {"authorization": f"Bearer {stack.key}"})]
                if state == cfg.states[0]:  # direct does not depend on the gateway's store: measured once
                    modes.insert(0, ("direct", upstream, {"authorization": f"Bearer {PROVIDER_KEY}"}))
                for mode, url, headers in modes:
                    if progress is not None:
                        progress(f"{state:6s} c={c:<3d} {mode}")
                    lat, failed, wall = asyncio.run(drive(url, bodies[mode][:n], c, headers, cfg.request_timeout_s,
                                                          cfg.warmup))
                    cells.append(Cell(mode, None if mode == "direct" else state, c, lat, failed, wall))
    return {"model": model_name, "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(cfg).items()},
            "cells": [c.to_dict() for c in cells], "rows": compare(cells)}


def compare(cells: list[Cell]) -> list[dict]:
    """One row per (concurrency, state, gateway mode): what the gateway adds against the direct call."""
    direct = {c.concurrency: c for c in cells if c.mode == "direct"}
    rows = []
    for c in cells:
        if c.mode == "direct":
            continue
        d = direct[c.concurrency]
        rows.append({"concurrency": c.concurrency, "state": c.state, "mode": c.mode, "ok": len(c.latencies_ms),
                     "failed": c.failed, "direct_p50_ms": d.p50, "p50_ms": c.p50, "p99_ms": c.p99,
                     "added_p50_ms": c.p50 - d.p50, "direct_rps": d.rps, "rps": c.rps,
                     "throughput_share": c.rps / d.rps if d.rps else float("nan")})
    return rows


def verdict(rows: list[dict]) -> list[str]:
    """The two goals, each met or not, read on the rows that state them."""
    out = []
    routed_c1 = [r for r in rows if r["mode"] == "routed" and r["concurrency"] == min(x["concurrency"] for x in rows)]
    if routed_c1:
        worst = max(r["added_p50_ms"] for r in routed_c1)
        out.append(f"added P50 with the router in process (c = {routed_c1[0]['concurrency']}, every store): at most "
                   f"{worst:.1f} ms — goal ≤ {GOAL_ADDED_P50_MS:g} ms {'met' if worst <= GOAL_ADDED_P50_MS else 'not met'}")
    top = max(r["concurrency"] for r in rows)
    at_top = [r for r in rows if r["concurrency"] == top]
    for mode in ("named", "routed"):
        share = [r["throughput_share"] for r in at_top if r["mode"] == mode]
        if share:
            low = min(share)
            out.append(f"throughput at c = {top}, {mode}: at least {low:.0%} of direct — goal ≥ "
                       f"{GOAL_THROUGHPUT_SHARE:.0%} {'met' if low >= GOAL_THROUGHPUT_SHARE else 'not met'}")
    return out


def to_markdown(result: dict) -> str:
    lines = [f"`switchcraft bench overhead` — upstream: replay server answering as {result['model']}; "
             f"{result['config']['requests']} requests a cell (c = 1: a third)", "",
             "| c | state | mode | direct P50 ms | gateway P50 / P99 ms | added P50 ms | direct req/s | gateway req/s "
             "| share of direct | failed |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['concurrency']} | {r['state']} | {r['mode']} | {r['direct_p50_ms']:.1f} | "
                     f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} | {r['added_p50_ms']:+.1f} | {r['direct_rps']:.0f} | "
                     f"{r['rps']:.0f} | {r['throughput_share']:.0%} | {r['failed']} |")
    lines += ["", *(f"- {v}" for v in verdict(result["rows"]))]
    return "\n".join(lines)


def write_results(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_markdown(result) + "\n")
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
