"""Labels for the model pool: every recorded output of every pool model, verified and priced.

    switchcraft label --pool configs/pool.yaml [--outputs PATH] [--run-dir runs/default]
    switchcraft label --pool configs/pools/nexusbench_2025.yaml --outputs ../shared/data/nexusbench_pool_outputs_2025-08/parquets

A folder of recordings of a benchmark whose harness judged the answers (NexusBench: its verdict per episode) is
labelled by that harness (`data.benchmarks`: the benchmark's `harness_labels`), not by our verifier.

For each (example, pool model): `correct` and `reason` from the verifier,
`cost_usd` from the pool's price of that model and the output: recorded token
usage x per-token prices, GPU-seconds (per query, or the recorded latency) x
the node's hourly price, or a flat price per query (`data.pool`); None when what
the price needs was not recorded. A pool that could not be costed at all from
these outputs is refused first (`data.pool.check_costable`). Writes into the run directory `labels.parquet`,
`labels_summary.csv` (per model: outputs, accuracy, mean cost per query) and
`labels.json` (what produced them).

    from data.labels import label_outputs, summarise
    labels = label_outputs(outputs, examples, pool)
"""

from __future__ import annotations

import csv
import json
import platform
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from data.decoders.base import is_no_answer
from data.errors import DataError
from data.pool import Pool, check_costable, load_pool
from data.schema import Example, Label, Output, write_labels
from data.verify import language_of, prepare, verify
from data.decoders import NATIVE_TEXT
from data.verify.batch import is_text
from data.verify.verifier import Prepared


@dataclass
class ModelSummary:
    model: str
    outputs: int
    correct: int
    accuracy: float
    costed: int  # outputs with recorded usage
    mean_cost_usd: float | None  # over the costed outputs

    def row(self) -> dict:
        return asdict(self)


def label_outputs(
    outputs: Iterable[Output],
    examples: dict[str, Example],
    pool: Pool,
    prepared: dict[str, Prepared] | None = None,
) -> list[Label]:
    """One Label per output of a pool model (matched by its recording folder or name).

    Outputs of models outside the pool are skipped; an output whose example is
    unknown is an error (the outputs and examples do not belong together). For
    a `prompt_style: native` model, a text answer counts as no tool call.
    """
    by_recording = {m.recording: m for m in pool.models} | {m.name: m for m in pool.models}
    prepared = prepared if prepared is not None else {}
    labels: list[Label] = []
    for out in outputs:
        pm = by_recording.get(out.model)
        if pm is None:
            continue
        ex = examples.get(out.example_id)
        if ex is None:
            raise DataError(
                f"output of {out.model} for unknown example {out.example_id!r}",
                hint="pass the examples these outputs answer",
            )
        p = prepared.get(ex.id)
        if p is None:
            p = prepared[ex.id] = prepare(ex.expected, ex.tools, language=language_of(ex))
        if pm.prompt_style == "native" and is_text(out.raw) and not is_no_answer(out.decode_error):
            # A native function-calling API returns calls as data; its text is no tool call,
            # whatever code the prose shows (the gateway would not execute it).
            v = verify(p, None, NATIVE_TEXT)
        else:
            v = verify(p, out.calls, out.decode_error)
        # model_construct: these values come from validated records; skip re-validating 10^5 labels.
        labels.append(
            Label.model_construct(
                example_id=ex.id,
                model=pm.name,
                correct=v.correct,
                reason=v.reason,
                detail=v.detail,
                cost_usd=pm.prices.output_cost_usd(out),
            )
        )
    return labels


def summarise(labels: Iterable[Label], pool: Pool) -> list[ModelSummary]:
    """Per pool model (in pool order): accuracy and mean cost per query."""
    acc: dict[str, list] = {m.name: [0, 0, 0, 0.0] for m in pool.models}  # outputs, correct, costed, cost sum
    for lab in labels:
        a = acc[lab.model]
        a[0] += 1
        a[1] += lab.correct
        if lab.cost_usd is not None:
            a[2] += 1
            a[3] += lab.cost_usd
    return [
        ModelSummary(name, n, c, c / n if n else 0.0, k, s / k if k else None)
        for name, (n, c, k, s) in acc.items()
    ]


def load_examples(path: str | Path) -> dict[str, Example]:
    """Examples by id: an examples.parquet, or a BFCL v1 folder (questions/ + possible_answer/)."""
    path = Path(path)
    if path.suffix == ".parquet":
        from data.schema import read_examples

        return {e.id: e for e in read_examples(path)}
    from data.sources import read_source

    return {e.id: e for e in read_source("bfcl_v1", str(path))}


def load_outputs(path: str | Path, examples: dict[str, Example], pool: Pool) -> list[Output]:
    """Outputs of the pool's models: an outputs.parquet, or a folder of recordings."""
    path = Path(path)
    if path.suffix == ".parquet":
        from data.schema import read_outputs

        return read_outputs(path)
    if not path.is_dir():
        raise DataError(
            "no such outputs file or folder",
            path=path,
            hint="pass --outputs (a benchmark's recordings: data/benchmarks/)",
        )
    from data.recorded import import_recorded

    return import_recorded(path, examples=examples, models=[m.recording for m in pool.models], progress=False)


@dataclass
class LabelRun:
    labels_path: Path
    summary_path: Path
    meta_path: Path
    summary: list[ModelSummary]
    labels: int
    seconds: float


def run_labels(
    pool_path: str | Path,
    outputs_path: str | Path,
    examples_path: str | Path,
    run_dir: str | Path,
    *,
    price_file: str | Path | None = None,
) -> LabelRun:
    """Label every output of the pool's models; `price_file` (BFCL's) only improves the
    fix suggested when a model cannot be costed."""
    t0 = time.perf_counter()
    pool = load_pool(pool_path)
    from data.benchmarks import find

    bench = find(outputs_path)
    if bench is not None and bench.harness:  # its harness's verdicts (NexusBench's per episode), not our verifier's
        labels, examples_path = bench.harness_labels(Path(outputs_path), pool, pool_path=pool_path), outputs_path
    else:
        check_costable(pool, outputs_path, pool_path=pool_path, price_file=price_file)
        examples = load_examples(examples_path)
        labels = label_outputs(load_outputs(outputs_path, examples, pool), examples, pool)
    if not labels:
        raise DataError(
            "no outputs of any pool model", path=outputs_path, hint=f"pool models: {', '.join(pool.names)}"
        )
    run = Path(run_dir)
    labels_path = write_labels(run / "labels.parquet", labels)
    summary = summarise(labels, pool)
    summary_path = run / "labels_summary.csv"
    with summary_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(ModelSummary.__dataclass_fields__))
        w.writeheader()
        for s in summary:
            w.writerow(s.row())
    seconds = time.perf_counter() - t0
    meta = {
        "command": "switchcraft label",
        "pool": str(pool_path),
        "outputs": str(outputs_path),
        "examples": str(examples_path),
        "labels": len(labels),
        "examples_labelled": len({lab.example_id for lab in labels}),
        "summary": [s.row() for s in summary],
        "seconds": round(seconds, 2),
        "python": platform.python_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    meta_path = run / "labels.json"
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return LabelRun(labels_path, summary_path, meta_path, summary, len(labels), seconds)
