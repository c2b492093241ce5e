"""Agreement with BFCL's checker: id alignment, disagreement classes, the report,
and the real 71-model comparison.

    .venv/bin/python -m pytest -q tests/data/verify/test_bfcl_agreement.py
"""

from __future__ import annotations

import csv

import pytest

from data.verify.bfcl_agreement import (
    CLASSES,
    bfcl_standardise,
    classify,
    compare,
    run_agreement,
    verdict_id,
    write_agreement_report,
)
from data.schema import Call, Example, Expected, ExpectedArg, ExpectedCall, Message
from data.tools import tools_from_docs
from data.verify import Verdict
from data.verify.batch import Checked, RecordedRow

TOOLS = tools_from_docs(
    {
        "name": "f",
        "parameters": {
            "type": "dict",
            "properties": {"s": {"type": "string"}, "n": {"type": "number"}},
            "required": ["s"],
        },
    }
)


def ex(category="simple", no_call=False):
    expected = (
        Expected.nothing()
        if no_call
        else Expected(
            alternatives=[[ExpectedCall(name="f", args={"s": ExpectedArg(values=["engine_size"])})]]
        )
    )
    return Example(
        id=f"bfcl_v1:{category}_0",
        source="bfcl_v1",
        category=category,
        messages=[Message(role="user", content="q")],
        tools=TOOLS,
        expected=expected,
    )


def checked(verdict, calls=None, decoder="python", raw="[f(s='x')]", model="m", eid="bfcl_v1:simple_0"):
    return Checked(RecordedRow(model, eid, raw), decoder, None, calls, verdict)


OK = Verdict(True, "ok", "")


def test_relevance_ids_are_shifted_by_one_and_others_not():
    assert verdict_id("bfcl_v1:relevance_0") == "relevance_1"
    assert verdict_id("bfcl_v1:relevance_238") == "relevance_239"
    assert verdict_id("bfcl_v1:simple_7") == "simple_7"


@pytest.mark.parametrize(
    "category, bfcl, cls",
    [
        ("simple", {"valid": False, "error_type": "ast_decoder:decoder_failed"}, "call_format"),
        ("simple", {"valid": False, "error_type": "simple_function_checker:wrong_count"}, "trailing_output"),
        (
            "simple",
            {"valid": False, "error_type": "type_error:nested", "error": "inner type <class 'float'>"},
            "int_for_float",
        ),
        (
            "java",
            {"valid": False, "error_type": "type_error:simple", "error": "Expected type HashMap, got str."},
            "language_encoding",
        ),
        ("simple", {"valid": False, "error_type": "value_error:string"}, "string_canonical"),
        (
            "simple",
            {
                "valid": False,
                "error_type": "simple_function_checker:missing_optional",
                "error": "Optional parameter: 'n'",
            },
            "documented_default",
        ),
        ("executable_simple", {"valid": False, "error_type": "executable_checker:wrong_result"}, "execution"),
        (
            "relevance",
            {"valid": False, "error_type": "relevance_error:decoder_success"},
            "relevance_text_counted_as_call",
        ),
    ],
)
def test_bfcl_too_strict_classes(category, bfcl, cls):
    assert classify(ex(category), bfcl, checked(OK, calls=[Call(name="f", arguments={"s": "x"})])) == cls
    assert CLASSES[cls][0] == "BFCL too strict"


def test_positional_arguments_reported_missing():
    c = checked(OK, calls=[Call(name="f", arguments={"s": "a", "n": 1})])
    bfcl = {
        "valid": False,
        "error_type": "simple_function_checker:missing_required",
        "error": "Missing required parameter: 'n'.",
    }
    assert classify(ex(), bfcl, c) == "positional_args"


def test_bfcl_lenient_string_standardisation_is_checked_on_the_real_value():
    bad = Verdict(
        False,
        "value_error:string",
        "call 1 'f': argument 's': got 'engine-size!', expected one of ['engine_size']",
    )
    c = checked(bad, calls=[Call(name="f", arguments={"s": "engine-size!"})])
    assert bfcl_standardise("Engine-Size") == bfcl_standardise("engine_size")
    # BFCL deletes '-' and '_' but not '!': not its standardisation, so unexplained
    assert classify(ex(), {"valid": True}, c) == "unexplained"
    c = checked(bad, calls=[Call(name="f", arguments={"s": "Engine-Size"})])
    assert classify(ex(), {"valid": True}, c) == "bfcl_string_standardisation"


def test_relevance_calls_split_into_real_calls_and_code_in_prose():
    v = Verdict(False, "no_call_expected", "no call was expected; got print")
    prose = checked(
        v,
        calls=[Call(name="print", arguments={})],
        raw="Here is how:\n```python\nprint(x)\n```",
        eid="bfcl_v1:relevance_0",
    )
    tool = checked(v, calls=[Call(name="f", arguments={})], raw="Sure. f(s='a')", eid="bfcl_v1:relevance_0")
    tagged = checked(v, calls=[Call(name="g", arguments={})], decoder="hermes", eid="bfcl_v1:relevance_0")
    rel = ex("relevance", no_call=True)
    assert classify(rel, {"valid": True}, prose) == "decoder_code_in_prose"
    assert classify(rel, {"valid": True}, tool) == "relevance_call_made"
    assert classify(rel, {"valid": True}, tagged) == "relevance_call_made"


def test_compare_counts_and_report(tmp_path):
    e = ex()
    items = [
        checked(OK, calls=[Call(name="f", arguments={"s": "x"})], model="a"),
        checked(OK, calls=[Call(name="f", arguments={"s": "x"})], model="b"),
        checked(OK, calls=[Call(name="f", arguments={"s": "x"})], model="c"),
    ]
    verdicts = {
        ("a", "simple_0"): {"valid": True},
        ("b", "simple_0"): {
            "valid": False,
            "error_type": "ast_decoder:decoder_failed",
            "error": "Invalid syntax.",
        },
    }
    rep = compare(items, verdicts, {e.id: e})
    assert (rep.compared, rep.overall, rep.unmatched) == (2, 0.5, ["c/bfcl_v1:simple_0"])
    assert rep.classes == {"call_format": 1}
    md, csv_path = write_agreement_report(rep, tmp_path)
    text = md.read_text()
    assert (
        "Overall agreement: 50.00%" in text and "`call_format`" in text and "| simple | 2 | 50.00% |" in text
    )
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 1 and rows[0]["model"] == "b" and rows[0]["cause"] == "BFCL too strict"


@pytest.mark.slow
def test_real_agreement_with_bfcl_checker(shared_data):
    rep = run_agreement(
        shared_data / "bfcl_v1",
        shared_data / "bfcl_v1_pool_outputs_2024-08-11",
        shared_data / "bfcl_v1_checker_verdicts_2024-08-11.jsonl",
    )
    assert rep.compared == 115_730 - 71  # output relevance_239 has no verdict after the shift
    assert rep.overall > 0.90  # 92.0% measured; the rest is BFCL-format strictness (docs/verifier.md)
    assert rep.rate("relevance") > 0.9  # 0.63 without the id shift
    assert rep.decoded_agree / rep.decoded_total > 0.96
    assert rep.classes["unexplained"] == 0
    assert rep.by_cause()["our bug"] < 50  # 0 measured (decoder gaps land here)
    assert {CLASSES[k][0] for k in rep.classes} <= {"BFCL too strict", "BFCL too lenient", "our bug"}


def test_native_function_calling_runs_are_recognised_by_name():
    from data.verify.batch import is_native_fc_run, is_text

    assert all(
        map(
            is_native_fc_run,
            [
                "gpt-4o-2024-08-06-FC",
                "mistral-large-2407-FC-Any",
                "open-mistral-nemo-2407-FC-Auto",
                "yi-large-fc",
                "gemini-1.0-pro",
            ],
        )
    )
    assert not any(map(is_native_fc_run, ["gpt-4-0613", "Salesforce_xLAM-7b-fc-r", "claude-3-opus-20240229"]))
    assert is_text("hello") and is_text(["a", "b"]) and not is_text([{"f": "{}"}])
