"""The importer of recorded outputs, on tiny result files written here (both BFCL layouts).

    .venv/bin/python -m pytest -q tests/data/test_recorded.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data.errors import DataError
from data.recorded import ImportReport, check_recorded, detect_layout, import_recorded, language_of
from data.schema import Example, Expected, Message, Tool, read_outputs

REPO = Path(__file__).resolve().parents[2]


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def v1_root(tmp_path) -> Path:
    root = tmp_path / "v1"
    write_jsonl(root / "gpt-x-FC" / "simple.jsonl", [
        {"id": "simple_0", "result": [{"math_factorial": '{"n": 5}'}], "input_token_count": 120, "output_token_count": 9, "latency": 0.5},
        {"id": "simple_1", "result": "I cannot do that.", "input_token_count": 100, "output_token_count": 7, "latency": 0.4},
    ])
    write_jsonl(root / "open-model" / "simple.jsonl", [
        {"id": "simple_0", "result": "[math.factorial(n=5)]"},  # open weights: no counts at all
        {"id": "simple_1", "result": "[f(", "input_token_count": 0, "output_token_count": 0, "latency": 1.5},  # 0/0: not measured
    ])
    write_jsonl(root / "open-model" / "java.jsonl", [{"id": "java_0", "result": "[A.b(flag=true, n=10L)]"}])
    return root


def example(qid: str, tool_name: str, category: str = "simple") -> Example:
    return Example(
        id=f"bfcl_v1:{qid}", source="bfcl_v1", category=category,
        messages=[Message(role="user", content="q")],
        tools=[Tool(name=tool_name, parameters={"type": "object", "properties": {"n": {"type": "integer"}}})],
        expected=Expected.nothing(),
    )


def test_v1_layout_raw_usage_latency_and_decoding(v1_root):
    report = ImportReport()
    outs = import_recorded(v1_root, report=report, progress=False)
    by = {(o.model, o.example_id): o for o in outs}
    assert len(outs) == 5 and report.files == 3 and report.total() == 5
    fc = by[("gpt-x-FC", "bfcl_v1:simple_0")]
    assert fc.raw == [{"math_factorial": '{"n": 5}'}]  # exactly as recorded
    assert fc.decoder == "native_fc" and fc.calls[0].name == "math_factorial"  # no tools given: not mapped
    assert (fc.usage.input_tokens, fc.usage.output_tokens, fc.latency_s) == (120, 9, 0.5)
    text = by[("gpt-x-FC", "bfcl_v1:simple_1")]
    assert text.calls is None and text.decode_error == "no_call: free text"
    plain = by[("open-model", "bfcl_v1:simple_0")]
    assert plain.usage.input_tokens is None and plain.usage.output_tokens is None and plain.latency_s is None
    zero = by[("open-model", "bfcl_v1:simple_1")]
    assert zero.usage.input_tokens is None and zero.usage.output_tokens is None and zero.latency_s == 1.5
    assert zero.decode_error.startswith("malformed: python:")
    java = by[("open-model", "bfcl_v1:java_0")]  # the category's language decides the decoder
    assert java.decoder == "java" and java.calls[0].arguments == {"flag": True, "n": 10}
    assert report.decoded == {"gpt-x-FC": 1, "open-model": 2}
    assert report.decode_rate("gpt-x-FC") == 0.5


def test_examples_map_names_back_and_unknown_ids_are_counted(v1_root):
    examples = {e.id: e for e in [example("simple_0", "math.factorial"), example("java_0", "A.b", "java")]}
    report = ImportReport()
    outs = import_recorded(v1_root, examples=examples, report=report, progress=False)
    names = {(o.model, o.example_id): [c.name for c in o.calls or []] for o in outs}
    assert names[("gpt-x-FC", "bfcl_v1:simple_0")] == ["math.factorial"]
    assert len(outs) == 3
    assert report.skipped == {("gpt-x-FC", "no example for id"): 1, ("open-model", "no example for id"): 1}


def test_models_filter_and_unknown_model(v1_root):
    outs = import_recorded(v1_root, models=["open-model"], progress=False)
    assert {o.model for o in outs} == {"open-model"} and len(outs) == 3
    with pytest.raises(DataError, match=r"no outputs for model\(s\) \['nope'\]; known: gpt-x-FC, open-model"):
        import_recorded(v1_root, models=["nope"], progress=False)


def test_a_pool_model_without_recordings_is_refused_before_any_work(v1_root):
    check_recorded(["gpt-x-FC", "open-model"], v1_root, pool_path="pool.yaml")  # every one recorded: no error
    with pytest.raises(DataError, match=r"^pool.yaml: no recorded outputs for pool model\(s\) \['nope'\] \(2 models are "
                                        r"recorded under .*v1\) \(record them with `switchcraft pool run --pool pool.yaml`"):
        check_recorded(["gpt-x-FC", "nope"], v1_root, pool_path="pool.yaml")


def test_v4_layout(tmp_path):
    root = tmp_path / "v4"
    write_jsonl(root / "run" / "result" / "org_model-a" / "non_live" / "BFCL_v4_simple_python_result.json", [
        {"id": "simple_python_0", "result": [{"f": "{}"}], "input_token_count": 10, "output_token_count": 2, "latency": 0.1},
    ])
    write_jsonl(root / "run" / "result" / "org_model-a" / "live" / "BFCL_v4_live_simple_result.json", [
        {"id": "live_simple_0-0-0", "result": [], "input_token_count": [5, 6], "output_token_count": [1, 2], "latency": [0.1, 0.2]},
    ])
    write_jsonl(root / "multiple_4models" / "model-b" / "non_live" / "BFCL_v4_multiple_result.json", [
        {"id": "multiple_0", "result": "[g(x=1)]", "input_token_count": 50, "output_token_count": 5, "latency": 1.0},
    ])
    # Score files sit alongside in BFCL's layout and are not outputs.
    write_jsonl(root / "run" / "score" / "org_model-a" / "non_live" / "BFCL_v4_simple_python_score.json", [{"accuracy": 1.0}])
    assert detect_layout(root) == "bfcl_v4"
    outs = import_recorded(root, progress=False)
    by = {(o.model, o.example_id): o for o in outs}
    assert set(by) == {
        ("org_model-a", "bfcl_v4:simple_python_0"),
        ("org_model-a", "bfcl_v4:live_simple_0-0-0"),
        ("model-b", "bfcl_v4:multiple_0"),
    }
    multi = by[("org_model-a", "bfcl_v4:live_simple_0-0-0")]  # per-turn counts are summed
    assert (multi.usage.input_tokens, multi.usage.output_tokens) == (11, 3)
    assert multi.latency_s == pytest.approx(0.3)
    assert multi.decode_error == "no_call: empty output"
    assert by[("model-b", "bfcl_v4:multiple_0")].calls[0].arguments == {"x": 1}


@pytest.mark.parametrize(
    "line, where",
    [
        ('{"id": "simple_0", "result": [}', r"simple\.jsonl:2: invalid JSON"),
        ('{"result": "[f()]"}', r"simple\.jsonl:2: field 'id'"),
        ('{"id": -1, "result": "[f()]"}', r"simple\.jsonl:2: field 'id'"),
        ('{"id": 1.5, "result": "[f()]"}', r"simple\.jsonl:2: field 'id'"),
        ('{"id": "simple_1"}', r"simple\.jsonl:2: field 'result'"),
        ('{"id": "simple_1", "result": "x", "input_token_count": -3}', r"simple\.jsonl:2: field 'input_token_count': negative"),
        ('{"id": "simple_1", "result": "x", "latency": "fast"}', r"simple\.jsonl:2: field 'latency': expected a number"),
        ('["not", "an", "object"]', r"simple\.jsonl:2: line is a list"),
    ],
)
def test_malformed_line_names_file_line_and_field(tmp_path, line, where):
    root = tmp_path / "v1"
    write_jsonl(root / "m" / "simple.jsonl", [{"id": "simple_0", "result": "[f()]"}, line])
    with pytest.raises(DataError, match=where):
        import_recorded(root, progress=False)


def test_integer_ids_are_question_indices_of_the_files_category(tmp_path):
    """BFCL's 2024-07-25 run numbers some files' lines 0, 1, … (its idx) instead of simple_0, simple_1, …"""
    root = tmp_path / "v1"
    write_jsonl(root / "m" / "simple.jsonl", [{"id": 0, "result": "[f()]"}, {"id": 1, "result": "[g()]"}])
    write_jsonl(root / "m" / "java.jsonl", [{"id": "java_0", "result": "[h()]"}])
    outs = import_recorded(root, progress=False)
    assert sorted(o.example_id for o in outs) == ["bfcl_v1:java_0", "bfcl_v1:simple_0", "bfcl_v1:simple_1"]


def test_duplicates_are_counted_not_kept(tmp_path):
    root = tmp_path / "v1"
    write_jsonl(root / "m" / "simple.jsonl", [{"id": "simple_0", "result": "[f()]"}, {"id": "simple_0", "result": "[g()]"}])
    report = ImportReport()
    outs = import_recorded(root, report=report, progress=False)
    assert [o.calls[0].name for o in outs] == ["f"]
    assert report.skipped == {("m", "duplicate (model, id)"): 1}


def test_layout_errors(tmp_path):
    with pytest.raises(DataError, match="not a folder"):
        detect_layout(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no recorded outputs found"):
        detect_layout(tmp_path / "empty")
    with pytest.raises(DataError, match="unknown layout 'v9'"):
        import_recorded(tmp_path / "empty", layout="v9", progress=False)


def test_language_of_categories():
    assert [language_of(c) for c in ("java", "simple_java", "javascript", "simple_javascript", "simple_python")] == [
        "java", "java", "javascript", "javascript", None,
    ]


def test_cli_import_outputs_writes_parquet(v1_root, tmp_path):
    from switchcraft.cli import app

    out = tmp_path / "outputs.parquet"
    result = CliRunner().invoke(app, [
        "import-outputs", "--source", "bfcl_v1", "--path", str(v1_root), "--out", str(out),
        "--examples", str(tmp_path / "none.parquet"), "--config", str(REPO / "configs" / "data.yaml"), "--no-progress",
    ])
    assert result.exit_code == 0, result.output
    assert "open-model" in result.output and "66.7%" in result.output and "60.0%" in result.output
    back = read_outputs(out)
    assert len(back) == 5 and {o.model for o in back} == {"gpt-x-FC", "open-model"}
    result = CliRunner().invoke(app, ["import-outputs", "--source", "all", "--path", str(v1_root)])
    assert result.exit_code == 1 and "--path needs one --source" in result.output


def test_forked_workers_give_the_same_outputs_and_errors(v1_root, tmp_path):
    one = import_recorded(v1_root, progress=False, workers=1)
    two = import_recorded(v1_root, progress=False, workers=2)
    assert two == one
    write_jsonl(v1_root / "zz-model" / "simple.jsonl", [{"id": "simple_0", "result": "[f()]", "latency": -1}])
    with pytest.raises(DataError, match=r"zz-model/simple\.jsonl:1: field 'latency': negative value -1"):
        import_recorded(v1_root, progress=False, workers=2)
