"""What routing costs before inference for a 2 KB and a 2 MB message: body parse, schema, packing, metadata; the cut
request (serving/long_input.py, what the gateway packs) against the whole text, median and a bootstrap 95% interval.

    switchcraft bench long-input --router runs/default/router_onnx [--reps 30] [--whole-reps 3]   # docs/serving.md
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from serving.gateway.body import parse_body
from serving.gateway.requests import to_schema
from serving.long_input import CappedEncoder
from training.export import RequestEncoder


def body(n_bytes: int) -> bytes:
    text = ("weather in Paris and Rome? " * (n_bytes // 27 + 1))[:n_bytes]
    return json.dumps({"messages": [{"role": "user", "content": text}]}).encode()


def cost_ms(encoder, raw: bytes) -> float:
    t0 = time.perf_counter()
    parsed = parse_body(raw, len(raw) + 1)
    encoder.encode(*to_schema(parsed["messages"], parsed.get("tools")))
    return (time.perf_counter() - t0) * 1e3


def interval(xs: list[float], rng: np.random.Generator) -> tuple[float, float, float]:
    """The median and a percentile-bootstrap 95% interval of it (2,000 resamples)."""
    boot = [np.median(rng.choice(xs, len(xs))) for _ in range(2000)]
    return float(np.median(xs)), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def measure(router: Path, reps: int = 30, whole_reps: int = 3, sizes: tuple[int, ...] = (2_000, 2_000_000),
            on_row=None) -> list[dict]:
    """One row per (encoder, body size): the median ms of parse → schema → packing → metadata, its 95% interval."""
    whole = RequestEncoder.from_dir(router)
    rng, rows = np.random.default_rng(0), []
    for name, encoder in (("cut", CappedEncoder(whole)), ("whole", whole)):
        for n in sizes:
            runs, raw = whole_reps if name == "whole" and n > 100_000 else reps, body(n)
            mid, lo, hi = interval([cost_ms(encoder, raw) for _ in range(runs)], rng)
            rows.append({"encoder": name, "bytes": len(raw), "median_ms": mid, "low_ms": lo, "high_ms": hi,
                         "runs": runs})
            if on_row:
                on_row(rows[-1])
    return rows
