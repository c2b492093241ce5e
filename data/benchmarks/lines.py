"""BFCL-style result files, one JSON object a line: the reader every BFCL benchmark shares.

    class MyBench(ResultLines):   # a benchmark whose recordings are such files: say where they lie, nothing else
        def holds(self, root): ...
        def result_files(self, root): ...

Each line: `{id, result, input_token_count?, output_token_count?, latency?}`; the example id is
`<benchmark name>:<id>`. `raw` keeps `result` exactly as recorded. Token counts become `Usage`; a count
that is absent, or recorded as 0 for both input and output (how BFCL writes "not measured" for open-weight
models: no real request has 0 input tokens), is None, never zero. Lists of counts (multi-turn) are summed. A
line that is the runner's inference error (a `traceback` field, or a result "Error during inference: …") is
no answer: `decode_error` "no_answer: …" (`data.decoders.is_no_answer`), never decoded, counted per model in
`ImportReport.no_answer`. A malformed line raises `DataError` naming file, line and field. Rows not imported
are counted by reason in the report (no example for the id, a duplicate of an earlier row).

Speed: decoding is most of the cost (~115k outputs), so with 16+ files the files are decoded in 2 forked
workers that send back plain tuples (pydantic models pickle slowly); the parent builds the Outputs, in file
order.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.benchmarks.base import Benchmark, ImportReport
from data.decoders import DecodeResult, decode, no_answer_error
from data.errors import DataError
from data.io import iter_jsonl
from data.schema import Call, Example, Output, Usage

INFERENCE_ERROR = "Error during inference"  # how BFCL's runner records a failed request in `result`


class ResultLines(Benchmark):
    """A benchmark whose recordings are BFCL-style JSON result lines (module docstring)."""

    def read_outputs(self, root: Path, *, examples: dict[str, Example] | None, models: list[str] | None,
                     report: ImportReport, progress: bool = False, workers: int | None = None) -> list[Output]:
        files = self.result_files(root)
        if models:
            wanted = set(models)
            missing = wanted - {m for m, _, _ in files}
            if missing:
                known = ", ".join(sorted({m for m, _, _ in files}))
                raise DataError(f"no outputs for model(s) {sorted(missing)}; known: {known}", path=root)
            files = [f for f in files if f[0] in wanted]
        tasks = [(model, category, file, self.name) for model, category, file in files]
        # Decoding builds ~10 objects per row and keeps them all: the cyclic GC would
        # rescan the growing heap again and again for nothing (no cycles are made).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            with _results(tasks, examples, workers) as results:
                return _collect(tasks, _progress(results, tasks, progress), report)
        finally:
            if gc_was_enabled:
                gc.enable()

    def recorded_usage(self, root: Path, models: set[str], done: set[str]) -> Iterator[tuple[str, bool, bool]]:
        for model, _, f in self.result_files(root):
            if model not in models or model in done:
                continue
            for lineno, row in iter_jsonl(f):
                tin, tout = row_usage(row, f, lineno)
                yield model, tin is not None and tout is not None, row.get("latency") is not None
                if model in done:
                    break


def language_of(category: str) -> str | None:
    """BFCL's Java/JavaScript categories (`java`, `simple_java`, …) are answered in that language."""
    if category.endswith("javascript"):
        return "javascript"
    if category.endswith("java"):
        return "java"
    return None


def _collect(tasks: list[tuple], results: Iterator[tuple[list[Row], Counter]], report: ImportReport) -> list[Output]:
    outputs: list[Output] = []
    seen: set[tuple[str, str]] = set()
    for (model, _, _, _), (rows, skipped) in zip(tasks, results):
        report.files += 1
        report.skipped.update({(model, reason): n for reason, n in skipped.items()})
        for row in rows:
            key = (model, row[0])
            if key in seen:
                report.skipped[(model, "duplicate (model, id)")] += 1
                continue
            seen.add(key)
            out = _output(model, row)
            report.add(out)
            outputs.append(out)
    return outputs


# A decoded row as it travels between processes: plain values pickle fast, models do not.
Row = tuple  # (example_id, raw, [(name, args)] | None, error, decoder, input_tokens, output_tokens, latency_s)

_EXAMPLES: dict[str, Example] | None = None  # what forked workers read (inherited, not pickled)


@contextmanager
def _results(tasks: list[tuple], examples: dict[str, Example] | None, workers: int | None) -> Iterator[Iterator[tuple[list[Row], Counter]]]:
    """(rows, skipped reasons) per task, in task order, from this process or from forked
    workers. The pool is started here, before any progress-bar thread exists."""
    n = workers if workers is not None else (min(2, os.cpu_count() or 1) if len(tasks) >= 16 else 1)
    if n <= 1 or "fork" not in mp.get_all_start_methods():
        yield (_rows_of_file(*task, examples=examples) for task in tasks)
        return
    global _EXAMPLES
    _EXAMPLES = examples
    try:
        with mp.get_context("fork").Pool(n) as pool:
            yield (_raise_error(r) for r in pool.imap(_worker, tasks, chunksize=2))
    finally:
        _EXAMPLES = None


def _raise_error(result: tuple[list[Row], Counter] | DataErrorArgs) -> tuple[list[Row], Counter]:
    if isinstance(result, DataErrorArgs):
        raise result.error()
    return result


@dataclass
class DataErrorArgs:
    """A DataError's fields: its own __init__ does not survive pickling back from a worker."""

    message: str
    path: str | None
    line: int | None
    field: str | None
    hint: str | None

    def error(self) -> DataError:
        return DataError(self.message, path=self.path, line=self.line, field=self.field, hint=self.hint)


def _worker(task: tuple) -> tuple[list[Row], Counter] | DataErrorArgs:
    gc.disable()  # as in the parent: nothing here makes cycles
    try:
        return _rows_of_file(*task, examples=_EXAMPLES)
    except DataError as e:
        return DataErrorArgs(e.message, e.path, e.line, e.field, e.hint)


def _output(model: str, row: Row) -> Output:
    example_id, raw, calls, error, decoder, tin, tout, latency = row
    return Output(
        example_id=example_id,
        model=model,
        raw=raw,
        calls=None if calls is None else [Call(name=n, arguments=a) for n, a in calls],
        decode_error=error,
        decoder=decoder,
        usage=Usage(input_tokens=tin, output_tokens=tout),
        latency_s=latency,
    )


def _rows_of_file(
    model: str, category: str, file: Path, prefix: str, *, examples: dict[str, Example] | None
) -> tuple[list[Row], Counter]:
    language = language_of(category)
    rows: list[Row] = []
    skipped: Counter = Counter()
    for lineno, row in iter_jsonl(file):
        qid = row.get("id")
        if isinstance(qid, int) and not isinstance(qid, bool) and qid >= 0:
            # BFCL's older runs number lines 0, 1, … in question order (its `idx`): the id is <category>_<n>.
            qid = f"{category}_{qid}"
        if not isinstance(qid, str) or not qid:
            raise DataError("missing id (a string like 'simple_0', or the 0-based question index)", path=file,
                            line=lineno, field="id")
        if "result" not in row:
            raise DataError("missing result", path=file, line=lineno, field="result")
        example_id = f"{prefix}:{qid}"
        tools = None
        if examples is not None:
            ex = examples.get(example_id)
            if ex is None:
                skipped["no example for id"] += 1
                continue
            tools = ex.tools
        raw = row["result"]
        res = DecodeResult(None, no_answer_error(str(raw))) if is_inference_error(row) else decode(raw, tools, language=language)
        tin, tout = row_usage(row, file, lineno)
        rows.append((
            example_id,
            raw,
            None if res.calls is None else [(c.name, c.arguments) for c in res.calls],
            res.error,
            res.decoder,
            tin,
            tout,
            _number(row.get("latency"), file, lineno, "latency", float),
        ))
    return rows, skipped


def is_inference_error(row: dict[str, Any]) -> bool:
    """Whether a result line records the runner's failed request rather than the model's answer."""
    raw = row.get("result")
    return "traceback" in row or isinstance(raw, str) and raw.startswith(INFERENCE_ERROR)


def row_usage(row: dict[str, Any], file: Path, line: int) -> tuple[int | None, int | None]:
    """(input, output) tokens of one result line: per-turn lists summed, 0/0 read as "not measured"."""
    tin = _number(row.get("input_token_count"), file, line, "input_token_count", int)
    tout = _number(row.get("output_token_count"), file, line, "output_token_count", int)
    if tin == 0 and not tout:  # BFCL's "not measured" (open-weight models)
        tin = tout = None
    return tin, tout


def _number(value: Any, file: Path, line: int, field: str, kind: type) -> Any:
    """A non-negative count or duration; lists (one entry per turn) are summed."""
    if value is None:
        return None
    if type(value) is kind and value >= 0:  # the common case, checked first (115k rows)
        return value
    if isinstance(value, list):
        flat = _flatten(value)
        value = sum(_number(v, file, line, field, kind) or 0 for v in flat) if flat else None
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"expected a number, got {value!r}", path=file, line=line, field=field)
    if value < 0:
        raise DataError(f"negative value {value}", path=file, line=line, field=field)
    if kind is int:
        if value != int(value):
            raise DataError(f"expected a whole number of tokens, got {value}", path=file, line=line, field=field)
        return int(value)
    return float(value)


def _flatten(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        out.extend(_flatten(v) if isinstance(v, list) else [v])
    return out


def _progress(results: Iterator[Any], tasks: list[tuple], enabled: bool) -> Iterator[Any]:
    """`results` (one per task), with a progress bar over the tasks' files."""
    if not enabled:
        yield from results
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("importing outputs", total=len(tasks))
        for (model, category, *_), result in zip(tasks, results):
            bar.update(task, description=f"{model[:32]} / {category}")
            yield result
            bar.advance(task)
