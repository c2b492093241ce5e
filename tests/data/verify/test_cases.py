"""The `switchcraft verify CASES.jsonl` contract: one verdict line per case, in
order; malformed cases get `invalid_case` and the rest still run.

    .venv/bin/python -m pytest -q tests/data/verify/test_cases.py
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from switchcraft.cli import app

TOOL = {
    "name": "weather.get",
    "description": "Weather.",
    "parameters": {
        "type": "dict",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
OPENAI_TOOL = {
    "type": "function",
    "function": {**TOOL, "parameters": {**TOOL["parameters"], "type": "object"}},
}


def case(id_, output, expected=None, tools=None, **extra):
    return {
        "id": id_,
        "tools": tools if tools is not None else [TOOL],
        "expected": expected
        if expected is not None
        else [{"weather.get": {"city": ["Paris"], "days": ["", 1]}}],
        "output": output,
        **extra,
    }


def run(tmp_path, lines, *args):
    src = tmp_path / "cases.jsonl"
    src.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    res = CliRunner().invoke(app, ["verify", str(src), *args])
    return res


def test_verdict_lines_in_order_for_every_output_form(tmp_path):
    lines = [
        case("python", "[weather.get(city='paris')]"),
        case("native_fc", [{"weather_get": json.dumps({"city": "Paris", "days": 1})}]),
        case("openai_tools", [{"weather_get": {"city": "Paris"}}], tools=[OPENAI_TOOL]),
        case("wrong", "[weather.get(city='Rome')]", note="extra fields are ignored"),
        case("text_for_no_call", "I cannot help with that.", expected=[]),
        case("call_for_no_call", "[weather.get(city='Paris')]", expected=[]),
    ]
    res = run(tmp_path, lines)
    assert res.exit_code == 0, res.output
    out = [json.loads(x) for x in res.stdout.splitlines()]
    assert [o["id"] for o in out] == [
        "python",
        "native_fc",
        "openai_tools",
        "wrong",
        "text_for_no_call",
        "call_for_no_call",
    ]
    assert [o["correct"] for o in out] == [True, True, True, False, True, False]
    assert out[3]["reason"] == "value_error:string" and "'city'" in out[3]["detail"]
    assert out[5]["reason"] == "no_call_expected"
    assert set(out[0]) == {"id", "correct", "reason", "detail"}


def test_invalid_cases_get_invalid_case_and_the_rest_still_run(tmp_path):
    lines = [
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"id": "no_output", "tools": [TOOL], "expected": []}),
        case("bad_tools", "x", tools=5),
        case("bad_expected", "x", expected=[{"weather.get": 3}]),
        case("bad_language", "x", language="cobol"),
        case("good", "[weather.get(city='Paris', days=1)]"),
    ]
    res = run(tmp_path, lines)
    out = [json.loads(x) for x in res.stdout.splitlines()]
    assert len(out) == 7
    assert [o["reason"] for o in out[:6]] == ["invalid_case"] * 6
    assert out[0]["detail"].startswith("line 1: invalid JSON")
    assert "missing field(s) output" in out[2]["detail"] and out[2]["id"] == "no_output"
    assert "field 'tools'" in out[3]["detail"]
    assert "field 'expected'" in out[4]["detail"]
    assert "field 'language'" in out[5]["detail"]
    assert out[6] == {"id": "good", "correct": True, "reason": "ok", "detail": ""}


def test_java_language_reads_string_encoded_values(tmp_path):
    tool = {
        "name": "setFlag",
        "parameters": {
            "type": "dict",
            "properties": {"flag": {"type": "boolean"}, "ids": {"type": "ArrayList"}},
            "required": ["flag", "ids"],
        },
    }
    expected = [{"setFlag": {"flag": [True], "ids": [[1, 2]]}}]
    raw = "[setFlag(flag='true', ids='Arrays.asList(2, 1)')]"
    res = run(
        tmp_path, [case("java", raw, expected, [tool], language="java"), case("py", raw, expected, [tool])]
    )
    out = [json.loads(x) for x in res.stdout.splitlines()]
    assert out[0]["correct"] is True
    assert out[1]["reason"] == "type_error:boolean"


def test_out_file(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    res = run(tmp_path, [case("a", "[weather.get(city='Paris')]")], "--out", str(out))
    assert res.exit_code == 0
    assert json.loads(out.read_text())["correct"] is True
