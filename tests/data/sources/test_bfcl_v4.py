"""The BFCL v3/v4 adapter on the real bfcl-eval package data, and on tiny crafted trees."""

import json

import pytest

from data.config import package_path
from data.errors import DataError
from data.sources import IngestReport, read_source

COUNTS = {
    "simple_python": 400, "simple_java": 100, "simple_javascript": 50, "multiple": 200, "parallel": 200,
    "parallel_multiple": 200, "irrelevance": 240, "live_simple": 258, "live_multiple": 1053,
    "live_parallel": 16, "live_parallel_multiple": 24, "live_irrelevance": 884, "live_relevance": 16,
    # one example per user turn
    "multi_turn_base": 734, "multi_turn_long_context": 734, "multi_turn_miss_func": 933, "multi_turn_miss_param": 934,
}
SKIPPED = {
    "format_sensitivity": 200, "memory": 155, "web_search": 100,
    "multi_turn_miss_func": 1,  # miss_func_49 turn 1 calls `tail` before it is given back
}


@pytest.fixture(scope="module")
def v4():
    report = IngestReport()
    examples = read_source("bfcl_v4", str(package_path("bfcl_eval/data")), report)
    return {e.id: e for e in examples}, report


def test_real_counts_per_category(v4):
    by_id, report = v4
    assert len(by_id) == sum(COUNTS.values()) == 6976
    assert {c: n for (_, c), n in report.counts.items()} == COUNTS
    assert {reason.split(":")[0]: n for (_, reason), n in report.skipped.items()} == SKIPPED


def test_real_single_turn(v4):
    by_id, _ = v4
    rel = by_id["bfcl_v4:live_relevance_0-0-0"].expected
    assert rel.any_call and not rel.alternatives
    live = by_id["bfcl_v4:live_simple_0-0-0"]
    assert live.category == "live_simple" and live.question.startswith("Can you retrieve the details")
    assert live.expected.alternatives[0][0].args["user_id"].values == [7890]
    assert by_id["bfcl_v4:live_irrelevance_0-0-0"].expected.no_call
    # `[]` for an array argument means the empty list (repaired, and said so)
    rec = by_id["bfcl_v4:live_simple_106-63-0"]
    assert rec.expected.alternatives[0][0].args["bank_hours_start"].values == [[]]
    assert any("bank_hours_start" in r for r in rec.meta["repairs"])


def test_real_multi_turn_miss_func(v4):
    by_id, _ = v4
    t2, t3 = by_id["bfcl_v4:multi_turn_miss_func_0:turn2"], by_id["bfcl_v4:multi_turn_miss_func_0:turn3"]
    # `sort` is withheld until turn 3: turn 2 asks for it and the right answer is no call
    assert t2.expected.no_call and "sort" not in {t.name for t in t2.tools}
    assert t2.meta["missing_functions"] == ["sort"]
    assert "sort" in {t.name for t in t3.tools} and t3.meta["added_functions"] == ["sort"]
    (call,) = t3.expected.alternatives[0]
    assert call.name == "sort" and call.args["file_name"].values == ["final_report.pdf"]  # positional, bound
    assert t3.messages[-1].content.startswith("I have updated some more functions")
    assert [m.role for m in t3.messages] == ["user", "assistant"] * 3 + ["user"]
    assert [c.name for c in t3.messages[1].tool_calls] == ["cd", "mkdir", "mv"]
    assert "cp" not in {t.name for t in t3.tools}  # excluded_function
    assert t3.meta["multi_turn"] and t3.meta["n_turns"] == 5 and t3.meta["turn"] == 3
    assert by_id["bfcl_v4:multi_turn_long_context_0:turn0"].meta["long_context"] is True


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _v3_tree(tmp_path):
    """An older release's layout: BFCL_v3_ prefix, one single-turn and one multi-turn file."""
    fdoc = {"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}}}
    _write(tmp_path / "BFCL_v3_simple.json", [{"id": "simple_0", "question": [[{"role": "user", "content": "f of 3"}]], "function": [fdoc]}])
    _write(tmp_path / "possible_answer/BFCL_v3_simple.json", [{"id": "simple_0", "ground_truth": [{"f": {"x": [3]}}]}])
    _write(tmp_path / "multi_turn_func_doc/math_api.json", [
        {"name": "add", "parameters": {"type": "dict", "properties": {"a": {"type": "float"}, "b": {"type": "float"}}}},
        {"name": "sqrt", "parameters": {"type": "dict", "properties": {"number": {"type": "float"}}}},
    ])
    _write(tmp_path / "BFCL_v3_multi_turn_miss_func.json", [{
        "id": "multi_turn_miss_func_0", "involved_classes": ["MathAPI"], "initial_config": {"MathAPI": {}},
        "question": [[{"role": "user", "content": "add 1 and 2, then take the root"}], [], [{"role": "user", "content": "and of 9?"}]],
        "missed_function": {"1": ["sqrt"]},
    }])
    _write(tmp_path / "possible_answer/BFCL_v3_multi_turn_miss_func.json",
           [{"id": "multi_turn_miss_func_0", "ground_truth": [["add(1, 2)"], ["sqrt(number=3)"], ["sqrt(9)"]]}])
    return tmp_path


def test_v3_layout_and_multi_turn(tmp_path):
    report = IngestReport()
    ex = {e.id: e for e in read_source("bfcl_v3", str(_v3_tree(tmp_path)), report)}
    assert sorted(ex) == ["bfcl_v3:multi_turn_miss_func_0:turn0", "bfcl_v3:multi_turn_miss_func_0:turn1",
                          "bfcl_v3:multi_turn_miss_func_0:turn2", "bfcl_v3:simple_0"]
    t0, t1, t2 = (ex[f"bfcl_v3:multi_turn_miss_func_0:turn{k}"] for k in range(3))
    assert [t.name for t in t0.tools] == ["add"] and t0.meta["missing_functions"] == ["sqrt"]
    assert {a: v.values for a, v in t0.expected.alternatives[0][0].args.items()} == {"a": [1], "b": [2]}
    assert [t.name for t in t1.tools] == ["add", "sqrt"]
    assert t2.messages[1].tool_calls[0].arguments == {"a": 1, "b": 2}
    assert t2.expected.alternatives[0][0].args["number"].values == [9]
    assert ex["bfcl_v3:simple_0"].category == "simple"


def test_bad_multi_turn_answer_names_file_line_field(tmp_path):
    root = _v3_tree(tmp_path)
    _write(root / "possible_answer/BFCL_v3_multi_turn_miss_func.json",
           [{"id": "multi_turn_miss_func_0", "ground_truth": [["add(1, 2"], [], []]}])
    with pytest.raises(DataError, match=r"possible_answer/BFCL_v3_multi_turn_miss_func\.json:1: field 'ground_truth\[0\]\[0\]'"):
        read_source("bfcl_v3", str(root))


def test_malformed_question_line(tmp_path):
    root = _v3_tree(tmp_path)
    (root / "BFCL_v3_simple.json").write_text('{"id": "simple_0", "question": \n')
    with pytest.raises(DataError, match=r"BFCL_v3_simple\.json:1"):
        read_source("bfcl_v3", str(root))


def test_missing_answer_is_counted(tmp_path):
    root = _v3_tree(tmp_path)
    _write(root / "possible_answer/BFCL_v3_simple.json", [{"id": "simple_9", "ground_truth": []}])
    report = IngestReport()
    ids = [e.id for e in read_source("bfcl_v3", str(root), report)]
    assert "bfcl_v3:simple_0" not in ids and report.skipped[("bfcl_v3", "simple: no answer for id")] == 1


def test_not_a_bfcl_folder(tmp_path):
    with pytest.raises(DataError, match="no BFCL_v3_"):
        read_source("bfcl_v4", str(tmp_path))
