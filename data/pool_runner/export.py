"""Stored answers -> `Output` records -> outputs.parquet, decoded by `data.decoders`.

switchcraft pool run ... --out runs/default/pool_outputs.parquet   (runs this at the end)
"""

from __future__ import annotations

from pathlib import Path

from data.pool_runner.request import PlannedCall
from data.pool_runner.store import CallStore, StoredCall
from data.schema import Example, Output, write_outputs


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
