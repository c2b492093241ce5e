"""Stored answers -> `Output` records -> outputs.parquet, decoded by `data.decoders`.

switchcraft pool run ... --out runs/default/pool_outputs.parquet   (runs this at the end)
"""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.pool_runner.store import CallStore, StoredCall
from data.schema import Example, Output, write_outputs

if TYPE_CHECKING:
    from data.pool import Pool
    from data.pool_runner.runner import PlannedCall, RunSummary


def to_output(call: StoredCall, example: Example) -> Output:
    try:
        from data.decoders import decode
    except ImportError:  # decoders not installed yet: keep the raw answer, say why it is undecoded
        return Output(
            example_id=call.example_id,
            model=call.model,
            raw=call.raw,
            decode_error="decoder_unavailable",
            usage=call.usage,
            latency_s=call.latency_s,
        )
    # BFCL's Java and JavaScript categories expect values in that language's syntax.
    language = example.category if example.category in ("java", "javascript") else None
    res = decode(call.raw, example.tools, language=language)
    calls, error = res.calls, res.error
    if calls is None and error is None:
        error = "decoder returned neither calls nor an error"
    return Output(
        example_id=call.example_id,
        model=call.model,
        raw=call.raw,
        calls=calls,
        decode_error=None if calls is not None else error,
        decoder=res.decoder,
        usage=call.usage,
        latency_s=call.latency_s,
    )


def export_outputs(
    store: CallStore, plans: dict[str, list[PlannedCall]], out: str | Path
) -> list[Output]:
    """One Output per planned (example, model) whose answer is stored, in plan order."""
    stored = {(c.example_id, c.model, c.request_hash): c for c in store.calls("done")}
    outputs = []
    for name, calls in plans.items():
        for c in calls:
            hit = stored.get((c.example.id, name, c.request_hash))
            if hit is not None:
                outputs.append(to_output(hit, c.example))
    write_outputs(out, outputs)
    return outputs


def write_run_record(
    out: str | Path,
    pool: Pool,
    summary: RunSummary,
    *,
    store: str | Path,
    n_examples: int,
    max_usd: float | None,
) -> Path:
    """`<out>.json` beside the outputs: the pool (key variable names, never keys), the run's
    counts and spend, and the versions that produced it."""
    versions: dict[str, Any] = {"python": platform.python_version()}
    for pkg in ("switchcraft", "httpx", "pydantic"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    record = {
        "command": "switchcraft pool run",
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "store": str(store),
        "examples": n_examples,
        "max_usd": max_usd,
        "pool": pool.model_dump(mode="json"),
        "summary": {
            "seconds": round(summary.seconds, 3),
            "complete": summary.complete,
            "budget_stop": summary.budget_stop,
            "resent_in_flight": summary.resent_in_flight,
            "models": {n: dataclasses.asdict(m) for n, m in summary.models.items()},
        },
        "versions": versions,
    }
    path = Path(out).with_suffix(".json")
    path.write_text(json.dumps(record, indent=2))
    return path
