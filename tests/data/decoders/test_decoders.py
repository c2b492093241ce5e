"""Hand-written cases for each decoder, its tricky inputs and its failure reasons.

    .venv/bin/python -m pytest -q tests/data/decoders/test_decoders.py
"""

from __future__ import annotations

import json

import pytest

from data.decoders import DECODERS, decode, decode_with, list_decoders
from data.decoders.names import map_names
from data.registry import UnknownNameError
from data.schema import Call, Tool


def tool(name: str, *params: str) -> Tool:
    return Tool(name=name, parameters={"type": "object", "properties": {p: {"type": "string"} for p in params}})


def pairs(res) -> list[tuple[str, dict]]:
    assert res.calls is not None, res.error
    return [(c.name, c.arguments) for c in res.calls]


# --- python ---------------------------------------------------------------------

@pytest.mark.parametrize(
    "raw, expected",
    [
        ("[f(a=1), g(b='x')]", [("f", {"a": 1}), ("g", {"b": "x"})]),
        ("\n\n[math.hypot(x=3, y=4.5)]\n", [("math.hypot", {"x": 3, "y": 4.5})]),
        ("f(a=1), g()", [("f", {"a": 1}), ("g", {})]),
        ("f(a=[1, 2], b={'k': None}, c=True);", [("f", {"a": [1, 2], "b": {"k": None}, "c": True})]),
        ("f(a=1); g(b=2);", [("f", {"a": 1}), ("g", {"b": 2})]),  # Nexusflow Raven
        ("['f(a=1)', 'g(b=\"x\")']", [("f", {"a": 1}), ("g", {"b": "x"})]),  # DBRX / Arctic
        ('["f"(a=1)]', [("f", {"a": 1})]),  # Mistral small quotes the name
        ("[calc\\_area(base\\_len=2)]", [("calc_area", {"base_len": 2})]),  # markdown escapes
        ("```python\n[f(a=1)]\n```", [("f", {"a": 1})]),
        ("```\n[f(a=1)]", [("f", {"a": 1})]),  # unterminated fence
        ("Here are the calls:\n\n[f(a=1)]", [("f", {"a": 1})]),
        ("[f(a=1)].\n\nThis line calls f with a=1.", [("f", {"a": 1})]),
        ("<|start_header_id|>[f(a=(1, 2))]", [("f", {"a": [1, 2]})]),
        ("```python\nprint(default_api.f(a='x'))\n```", [("f", {"a": "x"})]),  # Gemini code
        ("\n\n[f(a='x', b=2)", [("f", {"a": "x", "b": 2})]),  # list never closed
        ("['f(a='x')']", [("f", {"a": "x"})]),  # quotes inside a quoted call
        ("['f(a=\"x\"), g(b=1)]", [("f", {"a": "x"}), ("g", {"b": 1})]),
        ("f(x=lambda t: t**2, y=z)", [("f", {"x": "lambda t: t ** 2", "y": "z"})]),
    ],
)
def test_python_forms(raw, expected):
    res = decode(raw)
    assert res.decoder == "python"
    assert pairs(res) == expected


def test_python_binds_positional_args_to_schema_order():
    res = decode("[area(10, 5)]", [tool("area", "base", "height")])
    assert pairs(res) == [("area", {"base": 10, "height": 5})]
    assert pairs(decode("[area(10, 5)]")) == [("area", {"_pos0": 10, "_pos1": 5})]


def test_python_prefers_the_place_whose_calls_name_tools():
    # Gemma wraps the real calls in a function of its own.
    raw = "```python\nprime_factors([get_prime_factors(number=4), get_prime_factors(number=6)])\n```"
    res = decode(raw, [tool("get_prime_factors", "number")])
    assert pairs(res) == [("get_prime_factors", {"number": 4}), ("get_prime_factors", {"number": 6})]
    assert decode(raw).calls[0].name == "prime_factors"  # without tools: the outer call, as written


@pytest.mark.parametrize(
    "raw, kind, fragment",
    [
        ("I cannot help with that (no suitable function).", "no_call", "free text"),
        ("The answer is 42.", "no_call", "free text"),
        ("[]", "no_call", ""),
        ("", "no_call", "empty output"),
        ("   \n", "no_call", "empty output"),
        ("[f(a='x)]", "malformed", "python: not Python syntax"),
        ("[f(a=1) + 2]", "malformed", "not a call"),
    ],
)
def test_python_failures(raw, kind, fragment):
    res = decode(raw)
    assert res.calls is None and res.decoder is None
    assert res.error_kind == kind
    assert res.error.startswith(kind + ":")
    assert fragment in res.error


# --- structured -------------------------------------------------------------------

def test_native_fc_string_and_dict_arguments():
    raw = [{"spotify_play": '{"artist": "Taylor Swift", "duration": 20}'}, {"g": {"x": [1]}}]
    res = decode(raw)
    assert res.decoder == "native_fc"
    assert pairs(res) == [("spotify_play", {"artist": "Taylor Swift", "duration": 20}), ("g", {"x": [1]})]


def test_native_fc_keeps_calls_among_text_parts():
    raw = ["Here is the first:", {"f": '{"a": 1}'}, "and done."]  # Gemini interleaves text
    assert pairs(decode(raw)) == [("f", {"a": 1})]


def test_native_fc_failures():
    res = decode([{"f": "{not json"}])
    assert res.error_kind == "malformed" and "arguments of 'f' are not JSON" in res.error
    assert decode([]).error == "no_call: empty output"
    assert decode(["I am sorry, I cannot do that."]).error_kind == "no_call"


def test_openai_tool_calls_message_list_and_text():
    item = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    for raw in ({"role": "assistant", "content": None, "tool_calls": [item]}, [item], json.dumps({"tool_calls": [item]})):
        res = decode(raw)
        assert res.decoder == "openai_tool_calls"
        assert pairs(res) == [("f", {"a": 1})]
    assert decode({"role": "assistant", "tool_calls": []}).error_kind == "no_call"
    assert pairs(decode({"function_call": {"name": "g", "arguments": "{}"}})) == [("g", {})]


def test_xlam_string_and_parsed():
    value = {"tool_calls": [{"name": "spotify.play", "arguments": {"artist": "X", "duration": 20}}]}
    for raw in ("\n" + json.dumps(value), value):
        res = decode(raw)
        assert res.decoder == "xlam"
        assert pairs(res) == [("spotify.play", {"artist": "X", "duration": 20})]
    assert decode('{"tool_calls": []}').error == "no_call: xlam: empty tool_calls"


def test_json_calls_in_text():
    assert pairs(decode('```json\n[{"name": "f", "parameters": {"a": 1}}]\n```')) == [("f", {"a": 1})]
    assert pairs(decode("[{'name': 'f', 'arguments': {'a': True}}]")) == [("f", {"a": True})]
    assert pairs(decode("[('f', {'a': 1}), ('g', {})]")) == [("f", {"a": 1}), ("g", {})]  # Mistral tiny
    assert pairs(decode('{"name": "f", "arguments": {"ok": true, "n": null}}')) == [("f", {"ok": True, "n": None})]


def test_json_calls_rejects_an_echoed_function_doc():
    raw = "[{'name': 'bmi', 'description': 'Body mass index', 'parameters': {'type': 'dict', 'properties': {}}}]"
    res = decode(raw)
    assert res.calls is None and res.error_kind == "no_call" and "function description" in res.error


def test_json_calls_truncated_is_malformed():
    res = decode('[{"name": "f", "arguments": {"a": 1')
    assert res.error_kind == "malformed" and "json_calls: not JSON" in res.error


# --- tagged -----------------------------------------------------------------------

def test_hermes_tags_single_quotes_and_doubled_or_unclosed_tags():
    raw = (
        '<tool_call>\n{"arguments": {"a": 1}, "name": "f"}\n</tool_call>\n'
        "<tool_call>\n<tool_call>\n{\"arguments\": {'b': 'x', 'c': True}, \"name\": 'g'}\n</tool_call>\n"
        '<tool_call>\n{"arguments": {}, "name": "h"}'
    )
    res = decode(raw)
    assert res.decoder == "hermes"
    assert pairs(res) == [("f", {"a": 1}), ("g", {"b": "x", "c": True}), ("h", {})]


def test_hermes_broken_body_is_malformed():
    res = decode("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>")
    assert res.error_kind == "malformed" and res.error.startswith("malformed: hermes: <tool_call> body is not JSON")
    assert decode("<tool_call>\nI will call f.\n</tool_call>").error_kind == "malformed"


def test_chatml_theta_form_ignores_the_prose_after():
    raw = '<|im_start|>\n{"arguments": {"n": 20}, "name": "fib"}\n<|im_start|><|im_start|>assistant\n\nHere it is.'
    res = decode(raw)
    assert res.decoder == "chatml" and pairs(res) == [("fib", {"n": 20})]


def test_granite_calls_and_no_function():
    raw = '<function_call> {"name": "f", "arguments": {"a": 1}} <function_call> {"name": "g", "arguments": {}}'
    assert pairs(decode(raw)) == [("f", {"a": 1}), ("g", {})]
    res = decode('<function_call> {"name": "no_function", "arguments": {}}')
    assert res.error == "no_call: granite: granite answered no_function"


def test_glaive_single_quoted_arguments_string():
    raw = """<functioncall> {"name": "get_news", "arguments": '{"country": "US", "n": 3}'} <|endoftext|>"""
    res = decode(raw)
    assert res.decoder == "glaive" and pairs(res) == [("get_news", {"country": "US", "n": 3})]


def test_glm_name_then_json_arguments():
    res = decode('calc_binomial_probability\n{"k": 5, "n": 20}')
    assert res.decoder == "glm" and pairs(res) == [("calc_binomial_probability", {"k": 5, "n": 20})]
    assert pairs(decode('f\n{"a": 1}\ng\n{"b": 2}')) == [("f", {"a": 1}), ("g", {"b": 2})]
    assert decode("Sure\nthe answer is {x}").calls is None


# --- java / javascript ------------------------------------------------------------------

def test_java_values():
    raw = '[Utils.make(monitor=dbMonitor, view="Emp\\"View", n=10L, r=2.5f, ok=true, none=null, c=\'x\', dest=new Path("/b"))]'
    res = decode(raw, language="java")
    assert res.decoder == "java"
    assert pairs(res) == [
        ("Utils.make", {"monitor": "dbMonitor", "view": 'Emp"View', "n": 10, "r": 2.5, "ok": True,
                        "none": None, "c": "x", "dest": 'new Path("/b")'}),
    ]


def test_java_broken_inner_quotes_and_quoted_call_and_positional():
    res = decode("[F.get(source='SELECT * FROM t WHERE s = 'active'')]", language="java")
    assert pairs(res) == [("F.get", {"source": "SELECT * FROM t WHERE s = 'active'"})]
    res = decode("['S.get(node=n, t=Element.class)']", language="java")
    assert pairs(res) == [("S.get", {"node": "n", "t": "Element.class"})]
    res = decode("F.get(mon, 3)", [tool("F.get", "monitor", "count")], language="java")
    assert pairs(res) == [("F.get", {"monitor": "mon", "count": 3})]


def test_javascript_values():
    raw = "[q(items=['a', \"b\"], opts={limit: 5, 'deep': {x: undefined}}, cb=(id) => console.log(id, 1), n=-0.5)]"
    res = decode(raw, language="javascript")
    assert res.decoder == "javascript"
    assert pairs(res) == [
        ("q", {"items": ["a", "b"], "opts": {"limit": 5, "deep": {"x": None}}, "cb": "(id) => console.log(id, 1)", "n": -0.5}),
    ]


def test_java_only_for_java_language():
    raw = "[F.get(dest=new Path('/b'))]"  # not Python
    assert decode(raw).error_kind == "malformed"
    assert decode(raw, language="java").decoder == "java"
    res = decode("Sure, here it is.", language="java")
    assert res.error_kind == "no_call"


# --- names, registry, decode_with ------------------------------------------------------

def test_names_map_back_only_when_unambiguous():
    tools = [tool("math.factorial", "n"), tool("Geometry.create", "x")]
    res = decode([{"math_factorial": '{"n": 5}'}, {"Geometry_create": "{}"}, {"other_fn": "{}"}], tools)
    assert [c.name for c in res.calls] == ["math.factorial", "Geometry.create", "other_fn"]
    ambiguous = [tool("a.b", "x"), tool("a_b", "x")]
    assert map_names([Call(name="a_b", arguments={})], ambiguous)[0].name == "a_b"  # exact name wins
    assert map_names([Call(name="a-b", arguments={})], ambiguous)[0].name == "a-b"  # two candidates: kept
    assert map_names([Call(name="functions.math_factorial", arguments={})], tools)[0].name == "math.factorial"


def test_list_and_force_decoders():
    names = list_decoders()
    assert names[0] == "native_fc" and names[-1] == "python"
    assert {"python", "native_fc", "openai_tool_calls", "xlam", "hermes", "glaive", "java", "javascript"} <= set(names)
    assert pairs(decode_with("java", "f(a=true)")) == [("f", {"a": True})]
    assert pairs(decode_with("python", "f(a=true)")) == [("f", {"a": "true"})]
    res = decode_with("hermes", "[f(a=1)]")
    assert res.error == "no_call: hermes: no JSON object after <tool_call>"
    with pytest.raises(UnknownNameError, match="known: .*python"):
        decode_with("nope", "x")
    with pytest.raises(ValueError, match="already registered"):
        DECODERS.add("python", DECODERS.get("python"))


def test_combined_error_names_each_decoder_that_tried():
    res = decode('{"name": "f", "arguments": {"a": 1}')  # JSON-looking, truncated, no "(" for python
    assert res.error.startswith("malformed: json_calls: not JSON")
    res = decode("[{'a': 1}] and f(")
    assert res.error_kind == "malformed"
    assert "json_calls:" in res.error and "python:" in res.error


def test_unsupported_raw_type():
    assert decode(42).error == "malformed: unsupported output type int"
    assert decode(None).error == "no_call: empty output"


def test_results_do_not_share_argument_dicts():
    tools = [tool("f", "a")]
    first = decode("[f(a=[1])]", tools)
    first.calls[0].arguments["a"].append(2)
    again = decode("[f(a=[1])]", tools)  # served from the memo
    assert again.calls[0].arguments == {"a": [1]}


def test_flat_call_objects_and_chatml_after_prose():
    assert pairs(decode('[{"name": "f", "a": 1, "b": [2]}]')) == [("f", {"a": 1, "b": [2]})]
    raw = 'I will call it:\n<|im_start|>\n{"arguments": {"s": "AAPL"}, "name": "get_name"}\nDone.'
    assert pairs(decode(raw)) == [("get_name", {"s": "AAPL"})]


def test_java_call_after_prose_keeps_java_values():
    res = decode("Here is the call:\n\n[A.b(flag=true, n=10L)]\n\nIt sets the flag.", language="java")
    assert res.decoder == "java" and pairs(res) == [("A.b", {"flag": True, "n": 10})]


def test_example_code_in_prose_is_no_call_when_tools_are_known():
    raw = "None of the functions fit. You could write one:\n\n```python\nprint(inches_to_meters(10))\n```\nThat prints 0.254."
    res = decode(raw, [tool("convert_currency", "amount")])
    assert res.calls is None and res.error == "no_call: free text"
    assert pairs(decode("```python\n[wrong_tool(a=1)]\n```", [tool("f", "a")])) == [("wrong_tool", {"a": 1})]  # the whole answer


@pytest.mark.parametrize("language", [None, "java", "javascript"])
def test_pathological_nesting_never_crashes(language):
    for raw in ("[" * 5000, "f(a=" + "[" * 3000 + "]" * 3000 + ")", '{"name": "f", "arguments": ' + "[" * 3000,
                [{"f": "[" * 3000 + "]" * 3000}], "<tool_call>" + "{" * 3000):
        res = decode(raw, language=language)
        assert (res.calls is None) != (res.error is None)
