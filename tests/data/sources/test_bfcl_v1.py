"""The BFCL v1 adapter on the real files, and on crafted bad input."""

import json

import pytest

from data.errors import DataError
from data.sources import IngestReport, read_source

COUNTS = {
    "simple": 400, "multiple_function": 200, "parallel_function": 200, "parallel_multiple_function": 200,
    "java": 100, "javascript": 50, "relevance": 240, "executable_simple": 100,
    "executable_multiple_function": 50, "executable_parallel_function": 50,
    "executable_parallel_multiple_function": 40,
}


def test_all_1630_queries(shared_data):
    report = IngestReport()
    examples = read_source("bfcl_v1", str(shared_data / "bfcl_v1"), report)
    assert len(examples) == 1630
    assert {c: n for (_, c), n in report.counts.items()} == COUNTS
    assert not report.skipped
    by_id = {e.id: e for e in examples}
    simple0 = by_id["bfcl_v1:simple_0"]
    assert simple0.question.startswith("Find the area of a triangle")
    args = simple0.expected.alternatives[0][0].args
    assert args["base"].values == [10] and args["unit"].optional and args["unit"].values == ["units"]
    assert by_id["bfcl_v1:relevance_0"].expected.no_call
    ex = by_id["bfcl_v1:executable_simple_0"].expected.alternatives[0][0]
    assert ex.name == "calc_binomial_probability" and ex.args["p"].values == [0.6]
    # fn_1 / fn_2 keys of parallel_multiple_function name the same tool twice
    pm3 = [c.name for c in by_id["bfcl_v1:parallel_multiple_function_3"].expected.alternatives[0]]
    assert pm3.count("get_rectangle_property") == 2
    assert "deck" in {a for c in by_id["bfcl_v1:parallel_multiple_function_179"].expected.alternatives[0] for a in c.args}


def _tree(tmp_path, question_line, answer_line=None, category="simple"):
    (tmp_path / "questions").mkdir()
    (tmp_path / "questions" / f"{category}.jsonl").write_text(question_line + "\n")
    if answer_line is not None:
        (tmp_path / "possible_answer").mkdir()
        (tmp_path / "possible_answer" / f"{category}.jsonl").write_text(answer_line + "\n")
    return str(tmp_path)


def test_malformed_line_names_file_and_line(tmp_path):
    root = _tree(tmp_path, '{"id": "simple_0", "question": ')
    with pytest.raises(DataError, match=r"simple\.jsonl:1"):
        read_source("bfcl_v1", root)


def test_bad_ground_truth_names_field(tmp_path):
    q = json.dumps({"id": "simple_0", "question": "q", "function": {"name": "f", "parameters": {"type": "dict", "properties": {}}}})
    a = json.dumps({"id": "simple_0", "ground_truth": [{"f": {"x": 3}}]})
    with pytest.raises(DataError, match=r"possible_answer/simple\.jsonl:1: field 'ground_truth\[0\]\.x'"):
        read_source("bfcl_v1", _tree(tmp_path, q, a))


def test_question_without_answer_is_counted_not_dropped(tmp_path):
    q = json.dumps({"id": "simple_9", "question": "q", "function": {"name": "f", "parameters": {}}})
    a = json.dumps({"id": "simple_0", "ground_truth": [{"f": {}}]})
    report = IngestReport()
    assert read_source("bfcl_v1", _tree(tmp_path, q, a), report) == []
    assert report.skipped[("bfcl_v1", "simple: no answer for id")] == 1
