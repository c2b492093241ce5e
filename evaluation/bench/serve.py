"""Routing latency and throughput, side by side on one machine, on real packed BFCL v1 requests.

    switchcraft bench serve --onnx runs/default/router_onnx --router runs/default/router --out runs/default/bench_serve.md

Every row times one whole routing call at batch 1: packing + metadata
(client-side), the router graph, and the policy. Engines: PyTorch eager,
in-process ONNX Runtime fp32 and INT8, Triton over HTTP and gRPC (a real
tritonserver with the CPU repository variant). Throughput: requests/s with 8
and 32 callers in flight, each call alone, and again through the gateway's
routing micro-batcher (serving/gateway/batcher.py: concurrent calls merged
into one inference call, each decided alone). Levers, each measured alone against ORT fp32: padding
to 512 instead of the packed length, no ORT graph optimisation, one thread, a
3-layer encoder (speed only: it would need retraining). Engines take turns request by
request, so load drifting on a shared machine hits them alike; no engine's
workers busy-wait between calls (ORT spinning off, OpenMP passive), so one
cannot slow the next. Writes a
markdown table and the same numbers as JSON.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Route = Callable[[tuple], Any]


@dataclass
class BenchConfig:
    onnx_dir: Path
    router_dir: Path | None = None  # the PyTorch router (eager row and the levers that re-export)
    n_requests: int = 200
    warmup: int = 10
    concurrency: Sequence[int] = (8, 32)
    throughput_requests: int = 256
    threads: int | None = None
    triton: bool = True
    batched: bool = True  # the concurrency sweep through the gateway's micro-batcher too
    levers: bool = True
    data_root: Path = Path(os.environ.get("SWITCHCRAFT_DATA_ROOT", "../shared/data"))
    notes: list[str] = field(default_factory=list)


def bench_requests(data_root: Path, n: int) -> list[tuple]:
    """n BFCL v1 requests spread evenly over the file (every category, short and long)."""
    from data.sources import read_source

    examples = read_source("bfcl_v1", str(Path(data_root) / "bfcl_v1"))
    step = max(1, len(examples) // n)
    return [(e.messages, e.tools) for e in examples[::step][:n]]


def latency(route: Route, requests: Sequence[tuple], warmup: int) -> dict[str, float]:
    for r in requests[:warmup]:
        route(r)
    times = []
    for r in requests:
        t0 = time.perf_counter()
        route(r)
        times.append((time.perf_counter() - t0) * 1e3)
    t = np.array(times)
    return {"p50_ms": float(np.percentile(t, 50)), "p99_ms": float(np.percentile(t, 99)), "mean_ms": float(t.mean()),
            "n": len(t)}


def throughput(route: Route, requests: Sequence[tuple], concurrency: int, total: int) -> float:
    items = [requests[i % len(requests)] for i in range(total)]
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(route, items[:concurrency]))  # warm every thread's connection
        t0 = time.perf_counter()
        list(pool.map(route, items))
        return total / (time.perf_counter() - t0)


def batched_throughput(client, requests: Sequence[tuple], concurrency: int, total: int) -> float:
    """Requests/s of `concurrency` callers routing through the gateway's micro-batcher (its default delay)."""
    import asyncio

    from serving.gateway.batcher import RoutingBatcher
    from serving.core.metrics import GatewayMetrics

    items = [requests[i % len(requests)] for i in range(total)]

    async def callers(batch: list[tuple]) -> None:
        queue = iter(batch)

        async def caller() -> None:
            for r in queue:
                await batcher.route(*r)

        await asyncio.gather(*(caller() for _ in range(concurrency)))

    async def run() -> float:
        await callers(items[:concurrency])  # warm the threads and connections
        t0 = time.perf_counter()
        await callers(items)
        seconds = time.perf_counter() - t0
        await batcher.aclose()
        return total / seconds

    batcher = RoutingBatcher(client, GatewayMetrics(), max_batch_size=client.max_batch_size, max_queue=concurrency)
    return asyncio.run(run())


def torch_route(router_dir: Path, threads: int | None):
    """PyTorch eager on the same packed inputs, then the same policy."""
    import torch

    from serving.client import policy_from_info
    from training.export import RequestEncoder
    from training.router import load_router

    if threads:
        torch.set_num_threads(threads)
    router = load_router(router_dir)
    encoder = RequestEncoder(router.tokenizer, router.info)
    policy = policy_from_info(router.info)

    @torch.no_grad()
    def route(request):
        feed = encoder.batch([request])
        z = router.model(torch.from_numpy(feed["metadata"]), input_ids=torch.from_numpy(feed["input_ids"]),
                         attention_mask=torch.from_numpy(feed["attention_mask"]))
        p = 1.0 / (1.0 + np.exp(-(z[0].double().numpy() / router.temperatures)))
        return policy.decide(p)

    return route


def lever_graphs(router_dir: Path, work: Path) -> dict[str, Path]:
    """The raw (unfused) export and a fused 3-layer export, for the levers."""
    from training.export import export_onnx, optimize_onnx, quantize_int8
    from training.router import load_router

    router = load_router(router_dir)
    raw = export_onnx(router, work / "raw.onnx")
    layers = router.model.encoder.encoder.layer
    router.model.encoder.encoder.layer = layers[: max(1, len(layers) // 2)]
    router.model.encoder.config.num_hidden_layers = len(router.model.encoder.encoder.layer)
    half_raw = export_onnx(router, work / "half_raw.onnx")
    optimize_onnx(half_raw, work / "half.onnx", router.model.encoder.config)
    quantize_int8(work / "half.onnx", work / "half.int8.onnx")
    return {"raw": raw, "half": work / "half.onnx", "half_int8": work / "half.int8.onnx",
            "half_layers": len(router.model.encoder.encoder.layer), "layers": len(layers)}


def interleaved_latency(engines: list[tuple[str, Route]], requests: Sequence[tuple], warmup: int) -> dict[str, dict]:
    """Batch-1 latency of every engine, taking turns request by request.

    On a shared machine the load drifts during a run; taking turns gives every
    engine the same conditions, so the ratios stay fair even when the absolute
    numbers do not.
    """
    for _, route in engines:
        for r in requests[:warmup]:
            route(r)
    times: dict[str, list[float]] = {name: [] for name, _ in engines}
    for k, r in enumerate(requests):
        turn = engines[k % len(engines):] + engines[: k % len(engines)]  # no engine always goes first
        for name, route in turn:
            t0 = time.perf_counter()
            route(r)
            times[name].append((time.perf_counter() - t0) * 1e3)
    out = {}
    for name, t in times.items():
        a = np.array(t)
        out[name] = {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
                     "mean_ms": float(a.mean()), "n": len(a)}
    return out


def run_bench(cfg: BenchConfig) -> dict[str, Any]:
    from contextlib import ExitStack

    # Read by OpenMP when torch first loads: its workers then sleep between calls instead of
    # spinning, which would slow whichever engine takes the next turn.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    from serving.backends import OrtBackend
    from serving.client import RouterClient
    from serving.triton import TritonServer, write_model_repository

    requests = bench_requests(cfg.data_root, cfg.n_requests)
    fp32 = RouterClient.from_dir(cfg.onnx_dir, threads=cfg.threads)
    lengths = np.array([len(fp32.encoder.encode(m, t)[0]) for m, t in requests])
    engines: list[tuple[str, Route, bool, str]] = []  # name, route, throughput too?, note
    clients = {"ORT fp32 (in-process)": fp32}  # engines whose sweep also runs through the gateway's batcher
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    with ExitStack() as stack:
        if cfg.router_dir:
            engines.append(("PyTorch eager", torch_route(cfg.router_dir, cfg.threads), False, ""))
        engines.append(("ORT fp32 (in-process)", lambda r: fp32.route(*r), True, ""))
        if fp32.info["onnx"].get("int8"):
            int8 = RouterClient.from_dir(cfg.onnx_dir, int8=True, threads=cfg.threads)
            engines.append(("ORT INT8 (in-process)", lambda r: int8.route(*r), True, ""))
            clients["ORT INT8 (in-process)"] = int8
        if cfg.triton:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            repo = write_model_repository(cfg.onnx_dir, tmp / "repo", threads=cfg.threads or 0)
            server = stack.enter_context(TritonServer(repo / "cpu"))
            for proto, url in (("http", server.http_url), ("grpc", server.grpc_url)):
                client = RouterClient.from_dir(repo, backend=f"triton-{proto}", url=url, timeout_s=30)
                stack.callback(client.close)
                engines.append((f"Triton {proto.upper()} (CPU, Python backend + ORT)",
                                lambda r, c=client: c.route(*r), True, ""))
                clients[engines[-1][0]] = client
        if cfg.levers:
            padded = RouterClient.from_dir(cfg.onnx_dir, threads=cfg.threads, pad_multiple=512)
            engines.append(("lever: ORT fp32 padded to 512", lambda r: padded.route(*r), False, ""))
            one = RouterClient.from_dir(cfg.onnx_dir, threads=1)
            engines.append(("lever: ORT fp32, 1 thread", lambda r: one.route(*r), False, ""))
            one8 = RouterClient.from_dir(cfg.onnx_dir, threads=1, int8=True) if fp32.info["onnx"].get("int8") else None
            if one8 is not None:
                engines.append(("lever: ORT INT8, 1 thread", lambda r: one8.route(*r), False, ""))
            if cfg.router_dir:
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                graphs = lever_graphs(cfg.router_dir, tmp)
                for name, path, optimize in (("fp32, no graph optimisation (raw export, ORT_DISABLE_ALL)", graphs["raw"], False),
                                             ("fp32, raw export, online ORT_ENABLE_ALL only", graphs["raw"], True),
                                             (f"fp32, {graphs['half_layers']} of {graphs['layers']} encoder layers (fused)",
                                              graphs["half"], True),
                                             (f"INT8, {graphs['half_layers']} of {graphs['layers']} encoder layers",
                                              graphs["half_int8"], True)):
                    client = RouterClient(fp32.encoder, OrtBackend(path, threads=cfg.threads, optimize=optimize),
                                          fp32.info, version=fp32.version)
                    engines.append((f"lever: ORT {name}", lambda r, c=client: c.route(*r), False,
                                    "speed only: needs retraining" if "layers" in name else ""))
        print(f"timing {len(engines)} engines in turn on {len(requests)} requests", flush=True)
        lat = interleaved_latency([(n, r) for n, r, _, _ in engines], requests, cfg.warmup)
        encode = latency(lambda r: fp32.encoder.encode(*r), requests, cfg.warmup)
        rows = []
        for name, route, conc, note in engines:
            row = {"engine": name, **lat[name], "note": note}
            if conc:
                for c in cfg.concurrency:
                    row[f"rps_c{c}"] = throughput(route, requests, c, cfg.throughput_requests)
                    if cfg.batched and name in clients:
                        row[f"batched_rps_c{c}"] = batched_throughput(clients[name], requests, c, cfg.throughput_requests)
            rows.append(row)
            print(f"  {name}: p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms", flush=True)
    return {
        "rows": rows, "encode": encode, "seconds": time.perf_counter() - t0,
        "packed_tokens": {"mean": float(lengths.mean()), "p50": float(np.median(lengths)),
                          "p99": float(np.percentile(lengths, 99)), "max": int(lengths.max()),
                          "budget": fp32.encoder.packing.max_tokens},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_start": load_start,
                    "load_avg_end": os.getloadavg()},
        "requests": len(requests), "router_version": fp32.version, "notes": cfg.notes,
    }


def to_markdown(result: dict[str, Any], concurrency: Sequence[int] = (8, 32)) -> str:
    rows = result["rows"]
    by = {r["engine"]: r for r in rows}
    fp32 = by.get("ORT fp32 (in-process)")
    batched = [c for c in concurrency if any(f"batched_rps_c{c}" in r for r in rows)]
    head = ["engine", "P50 ms", "P99 ms", "× vs fp32 P50", *[f"req/s @{c}" for c in concurrency],
            *[f"req/s @{c} batched" for c in batched], "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratio = f"{fp32['p50_ms'] / r['p50_ms']:.2f}" if fp32 else ""
        rps = [f"{r[f'rps_c{c}']:.1f}" if f"rps_c{c}" in r else "" for c in concurrency]
        rps += [f"{r[f'batched_rps_c{c}']:.1f}" if f"batched_rps_c{c}" in r else "" for c in batched]
        lines.append(f"| {r['engine']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {ratio} | " + " | ".join(rps)
                     + f" | {r.get('note', '')} |")
    tok, enc, m = result["packed_tokens"], result["encode"], result["machine"]
    lines += ["", (f"{result['requests']} BFCL v1 requests at batch 1; packed length mean {tok['mean']:.0f}, "
                   f"P50 {tok['p50']:.0f}, P99 {tok['p99']:.0f}, max {tok['max']} tokens (budget {tok['budget']}). "
                   f"Packing + metadata alone: P50 {enc['p50_ms']:.1f} ms, P99 {enc['p99_ms']:.1f} ms "
                   "(inside every row)."),
              (f"Machine: {m['cpus']} CPUs, 1-min load average {m['load_avg_start'][0]:.1f} at start, "
               f"{m['load_avg_end'][0]:.1f} at end; engines timed in turn, request by request; "
               f"router {result['router_version']}."),
              *(["'batched': the same callers through the gateway's routing micro-batcher (one inference call "
                 "per gathered batch, each request decided alone)."] if batched else [])]
    checks = []
    torch_row = by.get("PyTorch eager")
    int8 = by.get("ORT INT8 (in-process)")
    if fp32:
        checks.append(f"in-process P99 {fp32['p99_ms']:.1f} ms (target ≤ 14): {'met' if fp32['p99_ms'] <= 14 else 'not met'}")
    if torch_row and fp32:
        x = torch_row["p50_ms"] / fp32["p50_ms"]
        checks.append(f"ORT fp32 vs PyTorch eager {x:.2f}× (target ≥ 2): {'met' if x >= 2 else 'not met'}")
    if int8 and fp32:
        x = fp32["p50_ms"] / int8["p50_ms"]
        checks.append(f"INT8 vs fp32 {x:.2f}× (target ≥ 1.5): {'met' if x >= 1.5 else 'not met'}")
    for proto in ("HTTP", "GRPC"):
        t = next((r for r in rows if r["engine"].startswith(f"Triton {proto}")), None)
        if t:
            checks.append(f"Triton {proto} P99 {t['p99_ms']:.1f} ms (target ≤ 25): {'met' if t['p99_ms'] <= 25 else 'not met'}")
    lines += ["", "Targets: " + "; ".join(checks) + "."] + [f"Note: {n}" for n in result.get("notes", [])]
    return "\n".join(lines) + "\n"


def write_results(result: dict[str, Any], out: Path, concurrency: Sequence[int] = (8, 32)) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_markdown(result, concurrency))
    out.with_suffix(".json").write_text(json.dumps(result, indent=2, default=float))
    return out
