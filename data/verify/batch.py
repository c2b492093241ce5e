"""Decode and verify many recorded outputs fast: the path `verify-agreement`
and the benchmark take over all 115,730 BFCL v1 recordings.

    from data.verify.batch import load_bfcl_v1, read_recorded_rows, decode_and_verify
    examples, prepared = load_bfcl_v1("../shared/data/bfcl_v1")
    rows = read_recorded_rows("../shared/data/bfcl_v1_pool_outputs_2024-08-11")
    results = decode_and_verify(rows, examples, prepared)

Many models return byte-identical outputs for the same query (about half of
the recordings), and decoding and verifying are pure functions of
(example, raw output), so each distinct pair is done once.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.decoders import NATIVE_TEXT
from data.errors import DataError
from data.io import iter_jsonl
from data.schema import Example
from data.verify import Prepared, Verdict, language_of, prepare, verify


@dataclass(slots=True)
class RecordedRow:
    """One recorded output, as read from `<root>/<model>/<category>.jsonl`."""

    model: str
    example_id: str
    raw: Any
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(slots=True)
class Checked:
    row: RecordedRow
    decoder: str | None
    decode_error: str | None
    calls: list | None  # decoded Calls (shared between identical outputs: do not mutate)
    verdict: Verdict


def load_bfcl_v1(path: str | Path, source: str = "bfcl_v1") -> tuple[dict[str, Example], dict[str, Prepared]]:
    """BFCL v1 examples by id, and each prepared for verification."""
    from data.sources import read_source

    examples = {e.id: e for e in read_source(source, str(path))}
    return examples, prepare_all(examples.values())


def prepare_all(examples: Iterable[Example]) -> dict[str, Prepared]:
    return {e.id: prepare(e.expected, e.tools, language=language_of(e)) for e in examples}


def read_recorded_rows(
    root: str | Path, models: Sequence[str] | None = None, prefix: str = "bfcl_v1:"
) -> list[RecordedRow]:
    """Every line of every `<model>/<category>.jsonl` under `root` (BFCL result layout)."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(
            "no such folder of recorded outputs", path=root, hint="see outputs.bfcl_v1 in configs/data.yaml"
        )
    names = list(models) if models else sorted(p.name for p in root.iterdir() if p.is_dir())
    rows: list[RecordedRow] = []
    for model in names:
        folder = root / model
        if not folder.is_dir():
            raise DataError(f"model {model!r} has no recordings", path=folder)
        for f in sorted(folder.glob("*.jsonl")):
            for line_no, d in iter_jsonl(f):
                if "id" not in d or "result" not in d:
                    raise DataError("a recorded output needs 'id' and 'result'", path=f, line=line_no)
                rows.append(
                    RecordedRow(
                        model, prefix + str(d["id"]), d["result"], d.get("input_token_count"), d.get("output_token_count")
                    )
                )
    return rows


# BFCL's native function-calling runs: `-FC`, `-FC-Any`, `-FC-Auto`, yi-large-fc, and
# every Gemini model (BFCL v1 called Gemini through its function-calling API).
_NATIVE_FC = re.compile(r"(-FC(-Any|-Auto)?|^yi-large-fc)$|^gemini-")


def is_native_fc_run(model: str) -> bool:
    """Whether a BFCL v1 recording comes from a native function-calling API."""
    return bool(_NATIVE_FC.search(model))


def is_text(raw: Any) -> bool:
    """A text answer: a string, or a list of text parts (no structured tool calls)."""
    return isinstance(raw, str) or (isinstance(raw, list) and all(isinstance(x, str) for x in raw))


def decode_and_verify(
    rows: Iterable[RecordedRow],
    examples: dict[str, Example],
    prepared: dict[str, Prepared],
    native: Callable[[str], bool] = is_native_fc_run,
) -> list[Checked]:
    """Decode each row's raw output with the project decoders and verify it.

    A native function-calling API returns tool calls as structured data; when
    such a model (`native(model)`) answers with text, it made no tool call,
    whatever code its prose contains (a gateway would not execute it).
    """
    from data.decoders import decode

    # Decoding builds many small objects and keeps them: the cyclic GC would rescan
    # the growing heap again and again for nothing (no cycles are made).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode_and_verify(rows, examples, prepared, decode, native)
    finally:
        if gc_was_enabled:
            gc.enable()


def _decode_and_verify(rows, examples, prepared, decode, native) -> list[Checked]:
    memo: dict[tuple[str, str, bool], tuple[str | None, str | None, list | None, Verdict]] = {}
    out: list[Checked] = []
    for row in rows:
        ex = examples.get(row.example_id)
        if ex is None:
            raise DataError(f"recorded output for unknown example {row.example_id!r} (model {row.model})")
        raw = row.raw
        native_text = native(row.model) and is_text(raw)
        key = (row.example_id, raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True), native_text)
        hit = memo.get(key)
        if hit is None:
            if native_text:
                hit = (None, NATIVE_TEXT, None, verify(prepared[row.example_id], None, NATIVE_TEXT))
            else:
                res = decode(raw, ex.tools, language=language_of(ex))
                hit = (
                    res.decoder,
                    res.error,
                    res.calls,
                    verify(prepared[row.example_id], res.calls, res.error),
                )
            memo[key] = hit
        out.append(Checked(row, *hit))
    return out
