"""What the gateway adds to a request: the same upstream called directly and through the gateway (routing off and
on), per concurrency and state store, against the goals.

    switchcraft bench overhead --router runs/bfcl_v1/router_onnx [--concurrency 1 --concurrency 16 --concurrency 64]

Method and figures: docs/performance.md.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from data.pool import PoolModel
from evaluation.bench._support import closed_loop, config_record, md_table, percentiles, write_outputs
from evaluation.bench.gateway import PROVIDER_KEY, LoopbackConfig, Stack, chat_body
from serving.gateway.breaker import endpoint_of

GOAL_ADDED_P50_MS = 5.0
GOAL_THROUGHPUT_SHARE = 0.80
STATES = ("memory", "sqlite", "redis")


@dataclass
class OverheadConfig(LoopbackConfig):
    concurrency: list[int] = field(default_factory=lambda: [1, 16, 64])
    states: list[str] = field(default_factory=lambda: list(STATES))
    requests: int = 300  # per cell (a concurrency × a state × a mode); c = 1 sends a third of them
    warmup: int = 20

    def __post_init__(self) -> None:
        if not self.concurrency or any(c < 1 or c > 256 for c in self.concurrency):
            raise ValueError("--concurrency: each level within [1, 256]")
        unknown = [s for s in self.states if s not in STATES]
        if unknown or not self.states:
            raise ValueError(f"--state {unknown}: memory, sqlite or redis")
        if not 10 <= self.requests <= 10_000:
            raise ValueError("--requests must be within [10, 10000] (the bench is bounded)")


def measured_model(stack: Stack) -> PoolModel:
    """The pool's cheapest native model: one upstream call whose body the gateway passes nearly as it came."""
    native = [m for m in stack.pool.models if m.prompt_style == "native"]
    if not native:
        raise ValueError("the pool has no native (function-calling) model to measure against")
    return min(native, key=lambda m: (m.prices.input_per_mtok or 0.0) + (m.prices.output_per_mtok or 0.0))


def bodies_for(stack: Stack, model: PoolModel) -> dict[str, list[dict]]:
    """The body per mode, one per bench example, in the same order."""
    from serving.gateway.answers import upstream_body
    from serving.gateway.requests import to_schema

    out: dict[str, list[dict]] = {"direct": [], "named": [], "routed": []}
    for ex in stack.examples:
        body = chat_body(ex)
        out["direct"].append(upstream_body({**body, "model": model.name}, to_schema(body["messages"], body["tools"])[1],
                                           model))
        out["named"].append({**body, "model": model.name})
        out["routed"].append({**body, "model": "router", "switchcraft": {"strategy": {"first": [model.name]}}})
    return out


async def drive(url: str | list[str], bodies: list[dict], concurrency: int, headers: dict, timeout_s: float,
                warmup: int) -> tuple[list[float], int, float]:
    """Send `bodies` at `concurrency` (after `warmup` unmeasured ones, one at a time): (latencies of 200s, failures,
    wall). Several URLs (replicas): body i goes to the (i mod n)-th, a load balancer's round robin."""
    urls = [url] if isinstance(url, str) else url
    latencies: list[float] = []
    failed: list[int] = []

    async def send(i: int) -> None:
        t0 = time.perf_counter()
        try:
            ok = (await http.post(urls[i % len(urls)], json=bodies[warmup + i])).status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            latencies.append((time.perf_counter() - t0) * 1e3)
        else:
            failed.append(i)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=timeout_s, limits=limits) as http:
        for i, body in enumerate(bodies[:warmup]):
            await http.post(urls[i % len(urls)], json=body)
        wall = await closed_loop(len(bodies) - warmup, concurrency, send)
    return latencies, len(failed), wall


def run_overhead(cfg: OverheadConfig, progress=None) -> dict:
    cells, model = [], None
    for state in cfg.states:
        with cfg.stack(requests=cfg.requests + cfg.warmup, concurrency=max(cfg.concurrency), state=state) as stack:
            model = measured_model(stack)
            bodies = bodies_for(stack, model)
            upstream = stack.servers[endpoint_of(model.base_url)].base_url.rstrip("/") + "/chat/completions"
            gateway = (stack.url + "/v1/chat/completions", {"authorization": f"Bearer {stack.key}"})
            modes = {"named": gateway, "routed": gateway}
            if state == cfg.states[0]:  # direct does not depend on the gateway's store: measured once
                modes = {"direct": (upstream, {"authorization": f"Bearer {PROVIDER_KEY}"}), **modes}
            for c in cfg.concurrency:
                n = cfg.warmup + (cfg.requests if c > 1 else max(10, cfg.requests // 3))
                for mode, (url, headers) in modes.items():
                    if progress is not None:
                        progress(f"{state:6s} c={c:<3d} {mode}")
                    lat, failed, wall = asyncio.run(drive(url, bodies[mode][:n], c, headers, cfg.request_timeout_s,
                                                          cfg.warmup))
                    cells.append({"mode": mode, "state": None if mode == "direct" else state, "concurrency": c,
                                  "ok": len(lat), "failed": failed, **(percentiles(lat) if lat else {
                                      "p50_ms": float("nan"), "p99_ms": float("nan")}),
                                  "rps": len(lat) / wall if wall else 0.0})
    return {"model": model.name, "config": config_record(cfg), "cells": cells, "rows": compare(cells)}


def compare(cells: list[dict]) -> list[dict]:
    """One row per (concurrency, state, gateway mode): what the gateway adds against the direct call."""
    direct, rows = {c["concurrency"]: c for c in cells if c["mode"] == "direct"}, []
    for c in (c for c in cells if c["mode"] != "direct"):
        d = direct[c["concurrency"]]
        rows.append({**c, "direct_p50_ms": d["p50_ms"], "added_p50_ms": c["p50_ms"] - d["p50_ms"],
                     "direct_rps": d["rps"], "throughput_share": c["rps"] / d["rps"] if d["rps"] else float("nan")})
    return rows


def verdict(rows: list[dict]) -> list[str]:
    """The two goals, each met or not, read on the rows that state them."""
    out, low_c, top = [], min(r["concurrency"] for r in rows), max(r["concurrency"] for r in rows)
    routed_low = [r["added_p50_ms"] for r in rows if r["mode"] == "routed" and r["concurrency"] == low_c]
    if routed_low:
        worst = max(routed_low)
        out.append(f"added P50 with the router in process (c = {low_c}, every store): at most {worst:.1f} ms — goal "
                   f"≤ {GOAL_ADDED_P50_MS:g} ms {'met' if worst <= GOAL_ADDED_P50_MS else 'not met'}")
    for mode in ("named", "routed"):
        share = [r["throughput_share"] for r in rows if r["concurrency"] == top and r["mode"] == mode]
        if share:
            out.append(f"throughput at c = {top}, {mode}: at least {min(share):.0%} of direct — goal ≥ "
                       f"{GOAL_THROUGHPUT_SHARE:.0%} {'met' if min(share) >= GOAL_THROUGHPUT_SHARE else 'not met'}")
    return out


def to_markdown(result: dict) -> str:
    head = ["c", "state", "mode", "direct P50 ms", "gateway P50 / P99 ms", "added P50 ms", "direct req/s",
            "gateway req/s", "share of direct", "failed"]
    rows = [[r["concurrency"], r["state"], r["mode"], f"{r['direct_p50_ms']:.1f}", f"{r['p50_ms']:.1f} / "
             f"{r['p99_ms']:.1f}", f"{r['added_p50_ms']:+.1f}", f"{r['direct_rps']:.0f}", f"{r['rps']:.0f}",
             f"{r['throughput_share']:.0%}", r["failed"]] for r in result["rows"]]
    return "\n".join([f"`switchcraft bench overhead` — upstream: replay server answering as {result['model']}; "
                      f"{result['config']['requests']} requests a cell (c = 1: a third)", "",
                      *md_table(head, rows, "rllrrrrrrr"), "", *(f"- {v}" for v in verdict(result["rows"]))])


def write_results(result: dict, out: Path) -> None:
    write_outputs(out, to_markdown(result), result)
