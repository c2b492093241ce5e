"""Routing latency and throughput of every engine on one machine, on real packed BFCL v1 requests; engines take
turns request by request and none busy-waits between calls.

    switchcraft bench serve --onnx runs/default/router_onnx --router runs/default/router --out runs/default/bench_serve.md

Method and figures: docs/performance.md.
"""

from __future__ import annotations

import asyncio
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.bench._support import md_table, percentiles, write_outputs

Route = Callable[[tuple], Any]
FP32 = "ORT fp32 (in-process)"


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
    return [(e.messages, e.tools) for e in examples[::max(1, len(examples) // n)][:n]]


def interleaved_latency(engines: list[tuple[str, Route]], requests: Sequence[tuple], warmup: int) -> dict[str, dict]:
    """Batch-1 latency of every engine, taking turns request by request (no engine always first: the load drifts)."""
    for _, route in engines:
        for r in requests[:warmup]:
            route(r)
    times: dict[str, list[float]] = {name: [] for name, _ in engines}
    for k, r in enumerate(requests):
        for name, route in engines[k % len(engines):] + engines[: k % len(engines)]:
            t0 = time.perf_counter()
            route(r)
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: {**percentiles(t), "mean_ms": float(np.mean(t)), "n": len(t)} for name, t in times.items()}


def ab_latency(a: str, b: str, n: int, data_root: Path) -> dict[str, dict]:
    """`switchcraft bench router-ab`: two exported routers in turn on n BFCL v1 requests spread over the file,
    packing and metadata included (`RouterClient.probabilities`), one ONNX Runtime thread each."""
    from data.sources import read_source
    from serving.client import RouterClient

    examples = read_source("bfcl_v1", str(Path(data_root) / "bfcl_v1"))
    requests = [(examples[i].messages, examples[i].tools) for i in np.linspace(0, len(examples) - 1, n).astype(int)]
    clients = {name: RouterClient.from_dir(name, threads=1) for name in (a, b)}
    try:
        return interleaved_latency([(name, lambda r, c=c: c.probabilities([r])) for name, c in clients.items()],
                                   requests, warmup=5)
    finally:
        for c in clients.values():
            c.close()


def throughput(route: Route, requests: Sequence[tuple], concurrency: int, total: int) -> float:
    items = [requests[i % len(requests)] for i in range(total)]
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(route, items[:concurrency]))  # warm every thread's connection
        t0 = time.perf_counter()
        list(pool.map(route, items))
        return total / (time.perf_counter() - t0)


def batched_throughput(client, requests: Sequence[tuple], concurrency: int, total: int) -> float:
    """Requests/s of `concurrency` callers routing through the gateway's micro-batcher (its default delay)."""
    from evaluation.bench._support import closed_loop
    from serving.core.metrics import GatewayMetrics
    from serving.gateway.batcher import RoutingBatcher

    async def run() -> float:
        batcher = RoutingBatcher(client, GatewayMetrics(), max_batch_size=client.max_batch_size, max_queue=concurrency)
        route = lambda i: batcher.route(*requests[i % len(requests)])  # noqa: E731
        await closed_loop(concurrency, concurrency, route)  # warm the threads and connections
        seconds = await closed_loop(total, concurrency, route)
        await batcher.aclose()
        return total / seconds

    return asyncio.run(run())


def torch_route(router_dir: Path, threads: int | None) -> Route:
    """PyTorch eager on the same packed inputs, then the same policy."""
    import torch

    from serving.client import policy_from_info
    from training.export import RequestEncoder
    from training.router import load_router

    if threads:
        torch.set_num_threads(threads)
    router = load_router(router_dir)
    encoder, policy = RequestEncoder(router.tokenizer, router.info), policy_from_info(router.info)

    @torch.no_grad()
    def route(request):
        feed = encoder.batch([request])
        z = router.model(torch.from_numpy(feed["metadata"]), input_ids=torch.from_numpy(feed["input_ids"]),
                         attention_mask=torch.from_numpy(feed["attention_mask"]))
        return policy.decide(1.0 / (1.0 + np.exp(-(z[0].double().numpy() / router.temperatures))))

    return route


def lever_graphs(router_dir: Path, work: Path) -> list[tuple[str, Path, bool]]:
    """(name, graph, ORT optimisation on) of the levers that re-export: the raw (unfused) export, and a fused
    export with half the encoder layers, fp32 and INT8."""
    from training.export import export_onnx, optimize_onnx, quantize_int8
    from training.router import load_router

    router = load_router(router_dir)
    raw = export_onnx(router, work / "raw.onnx")
    encoder = router.model.encoder
    layers = len(encoder.encoder.layer)
    encoder.encoder.layer = encoder.encoder.layer[: max(1, layers // 2)]
    encoder.config.num_hidden_layers = half = len(encoder.encoder.layer)
    optimize_onnx(export_onnx(router, work / "half_raw.onnx"), work / "half.onnx", encoder.config)
    quantize_int8(work / "half.onnx", work / "half.int8.onnx")
    return [("fp32, no graph optimisation (raw export, ORT_DISABLE_ALL)", raw, False),
            ("fp32, raw export, online ORT_ENABLE_ALL only", raw, True),
            (f"fp32, {half} of {layers} encoder layers (fused)", work / "half.onnx", True),
            (f"INT8, {half} of {layers} encoder layers", work / "half.int8.onnx", True)]


def engines_of(cfg: BenchConfig, fp32, stack: ExitStack) -> list[tuple[str, Route, Any, bool, str]]:
    """(name, route, its RouterClient or None, throughput too?, note) of every row."""
    from serving.backends import OrtBackend
    from serving.client import RouterClient
    from serving.triton import TritonServer, write_model_repository

    int8 = bool(fp32.info["onnx"].get("int8"))
    row = lambda name, client, conc=False, note="": (name, lambda r: client.route(*r), client, conc, note)  # noqa: E731
    engines = [("PyTorch eager", torch_route(cfg.router_dir, cfg.threads), None, False, "")] if cfg.router_dir else []
    engines.append(row(FP32, fp32, True))
    if int8:
        engines.append(row("ORT INT8 (in-process)", RouterClient.from_dir(cfg.onnx_dir, int8=True, threads=cfg.threads),
                           True))
    if cfg.triton:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        repo = write_model_repository(cfg.onnx_dir, tmp / "repo", threads=cfg.threads or 0)
        server = stack.enter_context(TritonServer(repo / "cpu"))
        for proto, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            client = RouterClient.from_dir(repo, backend=f"triton-{proto}", url=url, timeout_s=30)
            stack.callback(client.close)
            engines.append(row(f"Triton {proto.upper()} (CPU, Python backend + ORT)", client, True))
    if not cfg.levers:
        return engines
    engines += [row("lever: ORT fp32 padded to 512", RouterClient.from_dir(cfg.onnx_dir, threads=cfg.threads,
                                                                           pad_multiple=512)),
                row("lever: ORT fp32, 1 thread", RouterClient.from_dir(cfg.onnx_dir, threads=1))]
    if int8:
        engines.append(row("lever: ORT INT8, 1 thread", RouterClient.from_dir(cfg.onnx_dir, threads=1, int8=True)))
    if cfg.router_dir:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for name, path, optimize in lever_graphs(cfg.router_dir, tmp):
            client = RouterClient(fp32.encoder, OrtBackend(path, threads=cfg.threads, optimize=optimize), fp32.info,
                                  version=fp32.version)
            engines.append(row(f"lever: ORT {name}", client, note="speed only: needs retraining" if "layers" in name
                               else ""))
    return engines


def run_bench(cfg: BenchConfig) -> dict[str, Any]:
    # Read by OpenMP when torch first loads: its workers then sleep between calls instead of spinning, which would
    # slow whichever engine takes the next turn.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from serving.client import RouterClient

    requests = bench_requests(cfg.data_root, cfg.n_requests)
    fp32 = RouterClient.from_dir(cfg.onnx_dir, threads=cfg.threads)
    lengths = np.array([len(fp32.encoder.encode(m, t)[0]) for m, t in requests])
    load_start, t0 = os.getloadavg(), time.perf_counter()
    with ExitStack() as stack:
        engines = engines_of(cfg, fp32, stack)
        print(f"timing {len(engines)} engines in turn on {len(requests)} requests", flush=True)
        lat = interleaved_latency([(name, route) for name, route, *_ in engines], requests, cfg.warmup)
        encode = interleaved_latency([("encode", lambda r: fp32.encoder.encode(*r))], requests, cfg.warmup)["encode"]
        rows = []
        for name, route, client, conc, note in engines:
            row = {"engine": name, **lat[name], "note": note}
            for c in cfg.concurrency if conc else ():
                row[f"rps_c{c}"] = throughput(route, requests, c, cfg.throughput_requests)
                if cfg.batched and client is not None:
                    row[f"batched_rps_c{c}"] = batched_throughput(client, requests, c, cfg.throughput_requests)
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


def targets(rows: list[dict]) -> list[str]:
    """The targets, each met or not: in-process P99 ≤ 14 ms, ORT ≥ 2× PyTorch, INT8 ≥ 1.5× fp32, Triton P99 ≤ 25."""
    by = {r["engine"]: r for r in rows}
    fp32, eager, int8 = by.get(FP32), by.get("PyTorch eager"), by.get("ORT INT8 (in-process)")
    met = lambda ok: "met" if ok else "not met"  # noqa: E731
    out = [f"in-process P99 {fp32['p99_ms']:.1f} ms (target ≤ 14): {met(fp32['p99_ms'] <= 14)}"] if fp32 else []
    if eager and fp32:
        x = eager["p50_ms"] / fp32["p50_ms"]
        out.append(f"ORT fp32 vs PyTorch eager {x:.2f}× (target ≥ 2): {met(x >= 2)}")
    if int8 and fp32:
        x = fp32["p50_ms"] / int8["p50_ms"]
        out.append(f"INT8 vs fp32 {x:.2f}× (target ≥ 1.5): {met(x >= 1.5)}")
    for proto in ("HTTP", "GRPC"):
        t = next((r for r in rows if r["engine"].startswith(f"Triton {proto}")), None)
        if t:
            out.append(f"Triton {proto} P99 {t['p99_ms']:.1f} ms (target ≤ 25): {met(t['p99_ms'] <= 25)}")
    return out


def to_markdown(result: dict[str, Any], concurrency: Sequence[int] = (8, 32)) -> str:
    rows, fp32 = result["rows"], next((r for r in result["rows"] if r["engine"] == FP32), None)
    batched = [c for c in concurrency if any(f"batched_rps_c{c}" in r for r in rows)]
    cols = [f"rps_c{c}" for c in concurrency] + [f"batched_rps_c{c}" for c in batched]
    head = ["engine", "P50 ms", "P99 ms", "× vs fp32 P50", *[f"req/s @{c}" for c in concurrency],
            *[f"req/s @{c} batched" for c in batched], "note"]
    table = md_table(head, [[r["engine"], f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
                             f"{fp32['p50_ms'] / r['p50_ms']:.2f}" if fp32 else "",
                             *(f"{r[k]:.1f}" if k in r else "" for k in cols), r.get("note", "")] for r in rows])
    tok, enc, m = result["packed_tokens"], result["encode"], result["machine"]
    lines = [*table, "", (f"{result['requests']} BFCL v1 requests at batch 1; packed length mean {tok['mean']:.0f}, "
                          f"P50 {tok['p50']:.0f}, P99 {tok['p99']:.0f}, max {tok['max']} tokens (budget "
                          f"{tok['budget']}). Packing + metadata alone: P50 {enc['p50_ms']:.1f} ms, P99 "
                          f"{enc['p99_ms']:.1f} ms (inside every row)."),
             (f"Machine: {m['cpus']} CPUs, 1-min load average {m['load_avg_start'][0]:.1f} at start, "
              f"{m['load_avg_end'][0]:.1f} at end; engines timed in turn, request by request; "
              f"router {result['router_version']}."),
             *(["'batched': the same callers through the gateway's routing micro-batcher (one inference call "
                "per gathered batch, each request decided alone)."] if batched else []),
             "", "Targets: " + "; ".join(targets(rows)) + ".", *(f"Note: {n}" for n in result.get("notes", []))]
    return "\n".join(lines) + "\n"


def write_results(result: dict[str, Any], out: Path, concurrency: Sequence[int] = (8, 32)) -> None:
    write_outputs(out, to_markdown(result, concurrency), result, indent=2)
