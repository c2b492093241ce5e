"""BFCL v3/v4, as shipped in the PyPI package `bfcl-eval` (`bfcl_eval/data/`).

    switchcraft ingest --source bfcl_v4                   # path from configs/data.yaml
    switchcraft ingest --source bfcl_v3 --path gorilla-llm/Berkeley-Function-Calling-Leaderboard   # hub, needs network

`read_bfcl` reads BFCL v3 releases too (`data.sources.bfcl_v3`).

`BFCL_v4_<category>.json` (or `BFCL_v3_…` in older releases) hold the
questions, `possible_answer/` the ground truth, `multi_turn_func_doc/` the
function docs of multi-turn categories. Category = the file's category name.

- single-turn categories: as BFCL v1 (`_answers` + `expected_from_ground_truth`);
  `irrelevance` and `live_irrelevance` have no answer file: the right answer is no call.
- `multi_turn_*`: one example per user turn (`_bfcl_multi_turn`).
- `live_relevance`: any call to an offered tool is right, arguments unchecked
  (`Expected.any_call`).
- skipped, each row counted: `memory` and
  `web_search` (answers are free text), `format_sensitivity` (a list of
  other categories' ids to re-ask under 26 prompt formats, not questions).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from data.errors import DataError
from data.io import iter_json_rows, local_dir
from data.schema import Example, Expected
from data.sources import ADAPTERS, IngestReport
from data.sources._bfcl_multi_turn import multi_turn_examples
from data.sources.bfcl_common import (
    expected_from_ground_truth,
    id_and_tools,
    messages_from_question,
)

QUESTION_FILE = re.compile(r"^BFCL_v[34]_(?P<category>\w+)\.json$")
NO_CALL = {"irrelevance", "live_irrelevance"}
ANY_CALL = {"live_relevance"}
SKIP = {
    "memory": "answers are free text, not calls",
    "web_search": "answers are free text, not calls",
    "format_sensitivity": "a list of other categories' ids to re-ask, not questions",
}


def read_bfcl(source: str, location: str, report: IngestReport, categories: list[str] | None = None) -> Iterator[Example]:
    root = local_dir(location)
    files = sorted(p for p in root.glob("BFCL_v*_*.json") if QUESTION_FILE.match(p.name))
    if not files:
        raise DataError("no BFCL_v3_*.json / BFCL_v4_*.json question files", path=root,
                        hint="point --path at bfcl_eval/data (pip install --no-deps bfcl-eval)")
    for qfile in files:
        category = QUESTION_FILE.match(qfile.name)["category"]
        if categories and category not in categories:
            continue
        afile = root / "possible_answer" / qfile.name
        if category in SKIP:
            rows = [row for _, row in iter_json_rows(qfile)]
            n = sum(len(v) for v in rows[0].values()) if category == "format_sensitivity" else len(rows)
            report.skip(source, f"{category}: {SKIP[category]}", n)
        elif category.startswith("multi_turn"):
            yield from multi_turn_examples(source, category, qfile, afile, root / "multi_turn_func_doc", report)
        else:
            yield from _single_turn(source, category, qfile, afile, report)


def _single_turn(source: str, category: str, qfile: Path, afile: Path, report: IngestReport) -> Iterator[Example]:
    answers = {} if category in NO_CALL | ANY_CALL else {row.get("id"): (line, row) for line, row in iter_json_rows(afile)}
    for line, row in iter_json_rows(qfile):
        qid, tools = id_and_tools(row, path=qfile, line=line)
        repairs: list[str] = []
        if category in NO_CALL:
            expected = Expected.nothing()
        elif category in ANY_CALL:
            expected = Expected.anything()
        elif qid in answers:
            ans_line, ans = answers[qid]
            expected = expected_from_ground_truth(ans.get("ground_truth"), tools=tools, repairs=repairs, path=afile, line=ans_line)
            report.notes.extend(f"{source}:{qid}: repaired {r}" for r in repairs)
        else:
            report.skip(source, f"{category}: no answer for id")
            continue
        yield Example(
            id=f"{source}:{qid}",
            source=source,
            category=category,
            messages=messages_from_question(row.get("question"), path=qfile, line=line),
            tools=tools,
            expected=expected,
            meta={"repairs": repairs} if repairs else {},
        )


@ADAPTERS.register("bfcl_v4")
def read_bfcl_v4(location: str, report: IngestReport, **options) -> Iterator[Example]:
    return read_bfcl("bfcl_v4", location, report, **options)
