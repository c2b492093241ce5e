"""A/B routing latency of two exported routers, interleaved request by request (in-process ONNX Runtime).

    switchcraft bench router-ab ROUTER_ONNX_A ROUTER_ONNX_B [--n 300] [--data-root ../shared/data]

On a shared machine the load changes from second to second; timing A then B would compare the load, not the
routers. Here each request is routed by A, then by B, so both see the same load. Packing and metadata are
included (`RouterClient.probabilities`), one ONNX Runtime thread each. A relative check, not the README's
absolute figures (`switchcraft bench serve` on an idle machine).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def interleaved(a: str, b: str, n: int, data_root: Path) -> dict[str, dict[str, float]]:
    from data.sources import read_source
    from serving.client import RouterClient

    examples = read_source("bfcl_v1", str(data_root / "bfcl_v1"))
    pick = np.linspace(0, len(examples) - 1, n).astype(int)  # an even spread over the categories' blocks
    requests = [(examples[i].messages, examples[i].tools) for i in pick]
    clients = {a: RouterClient.from_dir(a, threads=1), b: RouterClient.from_dir(b, threads=1)}
    times: dict[str, list[float]] = {a: [], b: []}
    try:
        for c in clients.values():
            c.probabilities(requests[:5])  # warm-up
        for r in requests:
            for name, c in clients.items():
                t0 = time.perf_counter()
                c.probabilities([r])
                times[name].append((time.perf_counter() - t0) * 1e3)
    finally:
        for c in clients.values():
            c.close()
    return {k: {"p50_ms": float(np.percentile(v, 50)), "p99_ms": float(np.percentile(v, 99)), "n": len(v)}
            for k, v in times.items()}


def main(a: str, b: str, n: int = 300, data_root: Path = Path("../shared/data")) -> None:
    """`switchcraft bench router-ab`: print each router's P50 and P99."""
    for name, s in interleaved(a, b, n, data_root).items():
        print(f"{name}: P50 {s['p50_ms']:.2f} ms, P99 {s['p99_ms']:.2f} ms over {s['n']} requests")
