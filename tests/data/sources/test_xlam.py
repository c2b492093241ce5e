"""The xLAM adapter on the 2,685 real rows, and on crafted rows."""

import json

import pytest

from data.errors import DataError
from data.sources import IngestReport, read_source


def test_all_2685_real_rows(shared_data):
    report = IngestReport()
    ex = {e.id: e for e in read_source("xlam", str(shared_data / "xlam" / "rows.jsonl"), report)}
    assert len(ex) == 2685 and not report.skipped
    assert {c: n for (_, c), n in report.counts.items()} == {
        "simple": 146, "multiple": 430, "parallel": 372, "parallel_multiple": 1737}
    row0 = ex["xlam:0"]
    assert row0.category == "parallel" and row0.question.startswith("Where can I find live giveaways")
    assert [c.args["type"].values for c in row0.expected.alternatives[0]] == [["beta"], ["game"]]
    # a parameter literally named "type" is still a parameter, not the schema's type
    (tool,) = row0.tools
    assert tool.parameters["properties"]["type"]["type"] == "string"
    assert tool.parameters["properties"]["type"]["x-original-type"] == "str"
    assert tool.original["parameters"]["type"]["type"] == "str"


def _rows(tmp_path, *rows):
    p = tmp_path / "x.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(p)


TOOLS = json.dumps([{"name": "f", "description": "d", "parameters": {
    "n": {"type": "int", "description": "count"}, "tags": {"type": "List[str], optional", "description": "t"}}}])


def test_crafted_row(tmp_path):
    row = {"id": 7, "query": "f of 2", "tools": TOOLS, "answers": json.dumps([{"name": "f", "arguments": {"n": 2}}])}
    (ex,) = read_source("xlam", _rows(tmp_path, row))
    assert ex.id == "xlam:7" and ex.category == "simple"
    assert ex.tools[0].parameters == {
        "type": "object",
        "properties": {"n": {"description": "count", "type": "integer", "x-original-type": "int"},
                       "tags": {"description": "t", "type": "array", "x-original-type": "List[str], optional"}},
        "required": ["n"],
    }
    assert ex.expected.alternatives[0][0].args["n"].values == [2]


def test_bad_answers_json_names_line_and_field(tmp_path):
    good = {"id": 1, "query": "q", "tools": TOOLS, "answers": "[]"}
    bad = {"id": 2, "query": "q", "tools": TOOLS, "answers": "[{\"name\": "}
    with pytest.raises(DataError, match=r"x\.jsonl:2: field 'answers'"):
        read_source("xlam", _rows(tmp_path, good, bad))


def test_malformed_line_and_empty_answers(tmp_path):
    with pytest.raises(DataError, match=r"x\.jsonl:1"):
        read_source("xlam", _rows(tmp_path, '{"id": 1, "query":'))
    report = IngestReport()
    assert read_source("xlam", _rows(tmp_path, {"id": 1, "query": "q", "tools": TOOLS, "answers": "[]"}), report) == []
    assert report.skipped[("xlam", "no answer calls")] == 1
