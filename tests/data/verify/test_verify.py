"""Unit cases for the verifier's call-level rules, one group per rule.

.venv/bin/python -m pytest -q tests/data/verify/test_verify.py
"""

from __future__ import annotations

import pytest

from data.sources.bfcl_common import expected_from_ground_truth
from data.tools import tools_from_docs
from data.verify import REASONS, prepare, verify_turns
from data.verify.reasons import fail
from tests.data.verify.helpers import WEATHER, call, check, fn


# --- names ---------------------------------------------------------------------


def test_native_fc_rename_maps_back_to_dotted_tool():
    gt = [{"weather.get": {"city": ["Paris"]}}]
    assert check(WEATHER, gt, [call("weather_get", city="Paris")]).correct


def test_wrong_function_names_the_call():
    v = check([WEATHER, fn("other", {})], [{"weather.get": {"city": ["Paris"]}}], [call("other")])
    assert (v.correct, v.reason) == (False, "wrong_function")
    assert "'other'" in v.detail and "weather.get" in v.detail


def test_underscore_name_is_not_an_alias_when_no_tool_has_the_dot():
    v = check(fn("a_b", {}), [{"a_b": {}}], [call("a.b")])
    assert v.reason == "wrong_function"


def test_answer_name_with_bfcl_dedup_suffix_maps_to_tool():
    gt = {"weather.get 1": {"city": ["Paris"]}, "weather.get 2": {"city": ["Rome"]}}
    assert check(WEATHER, gt, [call("weather.get", city="Rome"), call("weather.get", city="Paris")]).correct


# --- parameters ----------------------------------------------------------------


def test_missing_required_parameter():
    v = check(WEATHER, [{"weather.get": {"city": ["Paris"]}}], [call("weather.get")])
    assert v.reason == "missing_required" and "'city'" in v.detail


def test_missing_expected_parameter_that_schema_does_not_require():
    doc = fn("f", {"a": {"type": "integer"}}, required=[])
    v = check(doc, [{"f": {"a": [3]}}], [call("f")])
    assert v.reason == "missing_expected"


def test_parameter_not_in_schema_is_rejected():
    v = check(
        WEATHER, [{"weather.get": {"city": ["Paris"]}}], [call("weather.get", city="Paris", country="FR")]
    )
    assert v.reason == "unexpected_param" and "'country'" in v.detail


def test_empty_positional_value_binding_no_parameter_gives_nothing():
    # `f({})` to a tool without parameters: the empty object, given by position, is no argument.
    doc = fn("adriel_tech_stack", {})
    assert check(doc, [{"adriel_tech_stack": {}}], [call("adriel_tech_stack", _pos0={})]).correct
    assert check(doc, [{"adriel_tech_stack": {}}], [call("adriel_tech_stack", _pos0=None)]).correct
    v = check(doc, [{"adriel_tech_stack": {}}], [call("adriel_tech_stack", _pos0={"a": 1})])
    assert v.reason == "unexpected_param" and "'_pos0'" in v.detail


def test_parameter_in_schema_but_not_in_answer_is_rejected():
    doc = fn("f", {"a": {"type": "integer"}, "b": {"type": "integer"}}, required=["a"])
    v = check(doc, [{"f": {"a": [1]}}], [call("f", a=1, b=2)])
    assert v.reason == "unexpected_param" and "'b'" in v.detail


def test_value_must_be_one_of_the_acceptable_values():
    gt = [{"weather.get": {"city": ["Paris", "Paris, France"]}}]
    assert check(WEATHER, gt, [call("weather.get", city="Paris, France")]).correct
    v = check(WEATHER, gt, [call("weather.get", city="Lyon")])
    assert v.reason == "value_error:string" and "'city'" in v.detail and "Lyon" in v.detail


# --- defaults ------------------------------------------------------------------


def test_omitted_parameter_accepted_when_answer_is_the_description_default():
    gt = [{"weather.get": {"city": ["Paris"], "unit": ["celsius"]}}]
    assert check(WEATHER, gt, [call("weather.get", city="Paris")]).correct


def test_omitted_parameter_accepted_when_answer_is_the_schema_default_field():
    gt = [{"weather.get": {"city": ["Paris"], "detailed": [False]}}]
    assert check(WEATHER, gt, [call("weather.get", city="Paris")]).correct


def test_omitted_parameter_rejected_when_answer_differs_from_default():
    gt = [{"weather.get": {"city": ["Paris"], "unit": ["fahrenheit"]}}]
    assert check(WEATHER, gt, [call("weather.get", city="Paris")]).reason == "missing_expected"


def test_explicit_default_accepted_where_omission_allowed():
    gt = [{"weather.get": {"city": ["Paris"], "days": [""]}}]  # only omission listed
    assert check(WEATHER, gt, [call("weather.get", city="Paris", days=1)]).correct
    assert check(WEATHER, gt, [call("weather.get", city="Paris", days=3)]).reason == "value_error:number"


def test_explicit_default_accepted_for_parameter_the_answer_leaves_out():
    gt = [{"weather.get": {"city": ["Paris"]}}]
    assert check(WEATHER, gt, [call("weather.get", city="Paris", unit="Celsius")]).correct
    assert check(WEATHER, gt, [call("weather.get", city="Paris", unit="kelvin")]).reason == "unexpected_param"


def test_optional_argument_may_be_omitted():
    gt = [{"weather.get": {"city": ["Paris"], "days": ["", 5]}}]
    assert check(WEATHER, gt, [call("weather.get", city="Paris")]).correct


# --- types ---------------------------------------------------------------------


def test_integer_equals_float_and_string_is_a_type_error():
    gt = [{"weather.get": {"city": ["Paris"], "days": [10]}}]
    assert check(WEATHER, gt, [call("weather.get", city="Paris", days=10.0)]).correct
    assert check(WEATHER, gt, [call("weather.get", city="Paris", days="ten")]).reason == "type_error:integer"
    assert check(WEATHER, gt, [call("weather.get", city="Paris", days="10")]).reason == "type_error:integer"


def test_boolean_is_not_a_number_and_string_is_not_a_boolean():
    gt = [{"weather.get": {"city": ["Paris"], "days": [1], "detailed": [True]}}]
    assert (
        check(WEATHER, gt, [call("weather.get", city="Paris", days=True, detailed=True)]).reason
        == "type_error:integer"
    )
    assert (
        check(WEATHER, gt, [call("weather.get", city="Paris", days=1, detailed="true")]).reason
        == "type_error:boolean"
    )


# --- parallel ------------------------------------------------------------------

PAR_GT = {"weather.get_1": {"city": ["Paris"]}, "weather.get_2": {"city": ["Rome"]}}


def test_parallel_calls_in_any_order():
    assert check(
        WEATHER, PAR_GT, [call("weather.get", city="Rome"), call("weather.get", city="Paris")]
    ).correct


def test_parallel_wrong_count():
    v = check(WEATHER, PAR_GT, [call("weather.get", city="Rome")])
    assert v.reason == "wrong_count" and "expected 2" in v.detail
    v = check(WEATHER, PAR_GT, [call("weather.get", city=c) for c in ("Rome", "Paris", "Rome")])
    assert v.reason == "wrong_count"


def test_parallel_duplicate_call_does_not_cover_two_answers():
    v = check(WEATHER, PAR_GT, [call("weather.get", city="Rome"), call("weather.get", city="Rome")])
    assert v.reason == "value_error:string" and "Rome" in v.detail


def test_parallel_match_is_bipartite_not_first_fit():
    # Output 1 fits both answers; first-fit would give it answer 1 and strand output 2.
    gt = {"weather.get_1": {"city": ["Paris", "Rome"]}, "weather.get_2": {"city": ["Paris"]}}
    assert check(WEATHER, gt, [call("weather.get", city="Paris"), call("weather.get", city="Rome")]).correct


# --- no call / call expected / decode errors -------------------------------------


def test_no_call_expected_text_is_right_and_a_call_is_wrong():
    assert check(WEATHER, [], None, decode_error="free text").correct
    assert check(WEATHER, [], []).correct
    v = check(WEATHER, [], [call("weather.get", city="Paris")])
    assert v.reason == "no_call_expected" and "weather.get" in v.detail


def test_call_expected_and_none_made():
    gt = [{"weather.get": {"city": ["Paris"]}}]
    assert check(WEATHER, gt, []).reason == "call_expected"
    assert check(WEATHER, gt, None, decode_error="no tool call").reason == "decode_error"


# --- multi-turn ------------------------------------------------------------------


def test_multi_turn_compares_each_turn():
    tools = tools_from_docs(WEATHER)
    turns = [
        prepare(expected_from_ground_truth([{"weather.get": {"city": ["Paris"]}}], tools=tools), tools),
        prepare(expected_from_ground_truth([{"weather.get": {"city": ["Rome"]}}], tools=tools), tools),
    ]
    assert verify_turns(
        turns, [[call("weather.get", city="Paris")], [call("weather.get", city="Rome")]]
    ).correct
    v = verify_turns(turns, [[call("weather.get", city="Paris")], [call("weather.get", city="Oslo")]])
    assert v.reason == "value_error:string" and v.detail.startswith("turn 2:")
    assert verify_turns(turns, [[call("weather.get", city="Paris")]]).reason == "wrong_count"


# --- vocabulary ------------------------------------------------------------------


def test_reasons_are_a_fixed_vocabulary():
    with pytest.raises(ValueError, match="unknown verifier reason"):
        fail("value_eror:string", "typo")
    assert all(r == "ok" or r.replace(":", "").replace("_", "").isalpha() for r in REASONS)


# --- one case per reason: the vocabulary is covered --------------------------------

ALL = fn(
    "g",
    {
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "s": {"type": "string"},
        "a": {"type": "array", "items": {"type": "integer"}},
        "o": {"type": "dict", "properties": {"k": {"type": "integer"}}},
        "x": {"type": "any"},
    },
    required=[],
)
JAVA = fn("h", {"flag": {"type": "boolean"}})

REASON_CASES = {
    "ok": (ALL, [{"g": {"i": [1]}}], [call("g", i=1)], None),
    "decode_error": (ALL, [{"g": {"i": [1]}}], None, None),
    "call_expected": (ALL, [{"g": {"i": [1]}}], [], None),
    "no_call_expected": (ALL, [], [call("g")], None),
    "wrong_count": (ALL, [{"g": {"i": [1]}}], [call("g", i=1), call("g", i=1)], None),
    "wrong_function": ([ALL, JAVA], [{"g": {"i": [1]}}], [call("h", flag=True)], None),
    "missing_required": (fn("r", {"q": {"type": "integer"}}), [{"r": {"q": [1]}}], [call("r")], None),
    "missing_expected": (ALL, [{"g": {"i": [1]}}], [call("g")], None),
    "unexpected_param": (ALL, [{"g": {"i": [1]}}], [call("g", i=1, zz=2)], None),
    "type_error:integer": (ALL, [{"g": {"i": [1]}}], [call("g", i="1")], None),
    "type_error:number": (ALL, [{"g": {"n": [1.5]}}], [call("g", n="1.5")], None),
    "type_error:boolean": (ALL, [{"g": {"b": [True]}}], [call("g", b=1)], None),
    "type_error:string": (ALL, [{"g": {"s": ["a"]}}], [call("g", s=["a"])], None),
    "type_error:array": (ALL, [{"g": {"a": [[1]]}}], [call("g", a=1)], None),
    "type_error:object": (ALL, [{"g": {"o": [{"k": [1]}]}}], [call("g", o=[1])], None),
    "type_error:encoded": (JAVA, [{"h": {"flag": [True]}}], [call("h", flag="yes")], "java"),
    "value_error:number": (ALL, [{"g": {"n": [1.5]}}], [call("g", n=2.5)], None),
    "value_error:boolean": (ALL, [{"g": {"b": [True]}}], [call("g", b=False)], None),
    "value_error:string": (ALL, [{"g": {"s": ["a"]}}], [call("g", s="b")], None),
    "value_error:array": (ALL, [{"g": {"a": [[1, 2]]}}], [call("g", a=[1, 1])], None),
    "value_error:object": (ALL, [{"g": {"o": [{"k": [1]}]}}], [call("g", o={"k": 2})], None),
    "value_error:other": (ALL, [{"g": {"x": [None]}}], [call("g", x=3)], None),
}


@pytest.mark.parametrize("reason", sorted(REASON_CASES))
def test_one_case_per_reason(reason):
    docs, gt, calls, language = REASON_CASES[reason]
    v = check(docs, gt, calls, language=language, decode_error="malformed: x" if calls is None else None)
    assert (v.correct, v.reason) == (reason == "ok", reason), v.detail


def test_every_reason_has_a_case():
    # invalid_case belongs to the verify command: tests/data/verify/test_cases.py; no_answer (an output that is
    # an inference error, not calls): tests/data/test_no_answer.py; episode_failed (a harness's label, never the
    # verifier's): tests/data/test_nexusbench.py
    assert set(REASONS) - {"invalid_case", "no_answer", "episode_failed"} == set(REASON_CASES)


def test_any_call_expected_accepts_any_offered_tool_and_rejects_others():
    from data.schema import Call, Expected, Tool
    from data.verify.verifier import prepare, verify

    p = prepare(Expected.anything(), [Tool(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})])
    assert verify(p, [Call(name="get_weather", arguments={"city": "anything"})]).correct
    assert verify(p, [Call(name="other", arguments={})]).reason == "wrong_function"
    assert verify(p, None, "no_call: free text").reason == "decode_error"
    assert verify(p, []).reason == "call_expected"
