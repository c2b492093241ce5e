"""Import recorded model outputs as decoded `Output`s, whichever benchmark's recordings a folder holds.

    switchcraft import-outputs --source bfcl_v1            # 71 models × 1,630 queries
    .venv/bin/python -m pytest -q tests/data/test_recorded.py

Each benchmark's adapter in `data/benchmarks/` knows its layout (where its result files lie, how one is named)
and how its files are read: BFCL v1, v3 and v4 as BFCL-style result lines (`data.benchmarks.lines`: usage,
inference errors, malformed lines), NexusBench as one Output per episode (`data.benchmarks.nexusbench`). A
folder's benchmark is detected (`data.benchmarks.detect`) or named (`layout=`); example ids are
`<benchmark>:<id>`. Rows not imported are counted by reason in the `ImportReport`.
"""

from __future__ import annotations

import time
from pathlib import Path

from data.benchmarks import detect, get, names
from data.benchmarks.base import Benchmark, ImportReport, ResultFile
from data.benchmarks.lines import is_inference_error, language_of, row_usage
from data.errors import DataError
from data.schema import Example, Output

__all__ = ["ImportReport", "check_recorded", "detect_layout", "import_recorded", "is_inference_error",
           "language_of", "result_files", "row_usage"]


def detect_layout(root: str | Path) -> str:
    """The name of the benchmark whose recordings are below `root`; else a DataError saying what was expected."""
    return detect(root).name


def benchmark_of(root: str | Path, layout: str) -> Benchmark:
    """The benchmark named `layout`, or the one `root` holds for "auto"."""
    if layout == "auto":
        return detect(root)
    if layout not in names():
        raise DataError(f"unknown layout {layout!r}; known: auto, {', '.join(names())}",
                        hint="each benchmark is a module of data/benchmarks/")
    return get(layout)


def result_files(root: str | Path, layout: str) -> list[ResultFile]:
    """(model, category, file) for every result file of the layout, sorted."""
    return benchmark_of(root, layout).result_files(Path(root))


def check_recorded(recordings: list[str], root: str | Path, *, pool_path: str | Path | None = None) -> None:
    """Refuse, before any work, a pool whose models (`recordings`: each pool model's recording name) have no
    result files under `root`: naming them, the folder, and how to record them."""
    have = {m for m, _, _ in result_files(root, "auto")}
    missing = [r for r in recordings if r not in have]
    if missing:
        where = f" --pool {pool_path}" if pool_path else ""
        raise DataError(f"no recorded outputs for pool model(s) {missing} ({len(have)} models are recorded under {root})",
                        path=pool_path or root,
                        hint=f"record them with `switchcraft pool run{where}`, or leave them out of the pool")


def import_recorded(
    path: str | Path,
    *,
    layout: str = "auto",
    examples: dict[str, Example] | None = None,
    models: list[str] | None = None,
    report: ImportReport | None = None,
    progress: bool = True,
    workers: int | None = None,
) -> list[Output]:
    """Read every result file under `path` into decoded Outputs (see the module docstring).

    `layout`: the benchmark's name, or "auto" to detect it. With `examples` (id → Example), each output is
    decoded with its example's tools (so rewritten names map back) and rows whose id has no example are
    skipped and counted; `models` keeps only those models' recordings. `workers` > 1 decodes files in that
    many forked processes (BFCL-style result lines; default: 2 on a machine with 2+ cores and 16+ files; the
    result is the same, in the same order).
    """
    t0 = time.perf_counter()
    report = report if report is not None else ImportReport()
    bench = benchmark_of(path, layout)
    outputs = bench.read_outputs(Path(path), examples=examples, models=models, report=report, progress=progress,
                                 workers=workers)
    report.seconds += time.perf_counter() - t0
    return outputs
