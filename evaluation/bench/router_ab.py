"""A/B routing latency of two exported routers taking turns request by request (in-process ONNX Runtime, one thread
each): a relative check; the absolute figures are `switchcraft bench serve`'s.

    switchcraft bench router-ab ROUTER_ONNX_A ROUTER_ONNX_B [--n 300] [--data-root ../shared/data]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evaluation.bench.serve import interleaved_latency


def interleaved(a: str, b: str, n: int, data_root: Path) -> dict[str, dict[str, float]]:
    from data.sources import read_source
    from serving.client import RouterClient

    examples = read_source("bfcl_v1", str(data_root / "bfcl_v1"))
    requests = [(examples[i].messages, examples[i].tools)  # an even spread over the categories' blocks
                for i in np.linspace(0, len(examples) - 1, n).astype(int)]
    clients = {name: RouterClient.from_dir(name, threads=1) for name in (a, b)}
    try:
        return interleaved_latency([(name, lambda r, c=c: c.probabilities([r])) for name, c in clients.items()],
                                   requests, warmup=5)
    finally:
        for c in clients.values():
            c.close()


def main(a: str, b: str, n: int = 300, data_root: Path = Path("../shared/data")) -> None:
    """`switchcraft bench router-ab`: print each router's P50 and P99."""
    for name, s in interleaved(a, b, n, data_root).items():
        print(f"{name}: P50 {s['p50_ms']:.2f} ms, P99 {s['p99_ms']:.2f} ms over {s['n']} requests")
