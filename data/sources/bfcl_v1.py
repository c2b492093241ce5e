"""BFCL v1 (Aug 2024): `questions/<category>.jsonl` + `possible_answer/<category>.jsonl`.

    switchcraft ingest --source bfcl_v1 --path ../shared/data/bfcl_v1

11 categories, 1,630 queries. `executable_*` carry their ground truth as
Python call strings in the question file; `relevance` has no answer file:
the right answer there is no call at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from data.errors import DataError
from data.io import iter_json_rows
from data.schema import Example, Expected
from data.sources import ADAPTERS, IngestReport
from data.sources.bfcl_common import (
    calls_from_strings,
    expected_from_ground_truth,
    id_and_tools,
    messages_from_question,
)

SOURCE = "bfcl_v1"
NO_CALL_CATEGORIES = {"relevance"}


@ADAPTERS.register(SOURCE)
def read_bfcl_v1(location: str, report: IngestReport, categories: list[str] | None = None) -> Iterator[Example]:
    root = Path(location)
    qdir = root / "questions"
    if not qdir.is_dir():
        raise DataError("no questions/ folder", path=root, hint="point --path at the bfcl_v1 folder of the shared data")
    files = sorted(qdir.glob("*.jsonl"))
    if categories:
        files = [f for f in files if f.stem in categories]
    for qfile in files:
        category = qfile.stem
        answers = _answers(root / "possible_answer" / qfile.name, category)
        for line, row in iter_json_rows(qfile):
            qid, tools = id_and_tools(row, path=qfile, line=line)
            repairs: list[str] = []
            if category in NO_CALL_CATEGORIES:
                expected = Expected.nothing()
            elif "ground_truth" in row:  # executable_*: call strings
                calls = calls_from_strings(row["ground_truth"], tools, path=qfile, line=line, field="ground_truth")
                expected = Expected.exact(calls)
            elif qid in answers:
                ans_line, gt = answers[qid]
                expected = expected_from_ground_truth(
                    gt, tools=tools, repairs=repairs, path=root / "possible_answer" / qfile.name, line=ans_line
                )
                if repairs:
                    report.notes.extend(f"{SOURCE}:{qid}: repaired {r}" for r in repairs)
            else:
                report.skip(SOURCE, f"{category}: no answer for id")
                continue
            meta = {k: row[k] for k in ("execution_result_type",) if k in row}
            if repairs:
                meta["repairs"] = repairs
            yield Example(
                id=f"{SOURCE}:{qid}",
                source=SOURCE,
                category=category,
                messages=messages_from_question(row.get("question"), path=qfile, line=line),
                tools=tools,
                expected=expected,
                meta=meta,
            )


def _answers(path: Path, category: str) -> dict[str, tuple[int, object]]:
    if category in NO_CALL_CATEGORIES or category.startswith("executable_") or not path.exists():
        return {}
    out = {}
    for line, row in iter_json_rows(path):
        if "id" not in row or "ground_truth" not in row:
            raise DataError("answer line needs 'id' and 'ground_truth'", path=path, line=line)
        out[row["id"]] = (line, row["ground_truth"])
    return out
