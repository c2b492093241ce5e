"""Round trips: random calls, encoded in each supported format, decode back to the same calls.

    .venv/bin/python -m pytest -q tests/data/decoders/test_property.py
"""

from __future__ import annotations

import json
import keyword

from hypothesis import given, settings
from hypothesis import strategies as st

from data.decoders import decode

IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s) and s not in ("print", "true", "false", "null", "True", "False", "None")
)
NAME = st.lists(IDENT, min_size=1, max_size=3).map(".".join)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)  # quotes, unicode, controls
SCALAR = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.booleans(),
    st.none(),
)
JSON_VALUE = st.recursive(
    SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8
)
ARGS = st.dictionaries(IDENT, JSON_VALUE, max_size=4)
CALLS = st.lists(st.tuples(NAME, ARGS), min_size=1, max_size=3)

SETTINGS = settings(max_examples=30, deadline=None)


def canon(calls) -> str:
    """Type-exact comparison: 1, 1.0 and True must not compare equal."""
    return json.dumps([[n, a] for n, a in calls], sort_keys=True)


def decoded(raw, language=None) -> str:
    res = decode(raw, language=language)
    assert res.calls is not None, res.error
    return canon((c.name, c.arguments) for c in res.calls)


def py_call(name, args) -> str:
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


@SETTINGS
@given(CALLS)
def test_python_list(calls):
    assert decoded("[" + ", ".join(py_call(n, a) for n, a in calls) + "]") == canon(calls)


def test_python_escaped_underscore_inside_a_string_is_data():
    assert decoded("[f(a='x\\_y')]") == canon([("f", {"a": "x\\_y"})])


@SETTINGS
@given(CALLS, st.sampled_from(["```python\n{}\n```", "Here you go:\n\n{}", "  {}\n", "{};"]))
def test_python_with_surroundings(calls, frame):
    assert decoded(frame.format("[" + ", ".join(py_call(n, a) for n, a in calls) + "]")) == canon(calls)


@SETTINGS
@given(CALLS, st.booleans())
def test_native_fc(calls, as_string):
    raw = [{n: json.dumps(a) if as_string else a} for n, a in calls]
    assert decoded(raw) == canon(calls)


@SETTINGS
@given(CALLS, st.booleans())
def test_openai_tool_calls(calls, as_text):
    msg = {
        "role": "assistant",
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)
        ],
    }
    assert decoded(json.dumps(msg) if as_text else msg) == canon(calls)


@SETTINGS
@given(CALLS, st.booleans())
def test_xlam(calls, as_text):
    value = {"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}
    assert decoded("\n" + json.dumps(value) if as_text else value) == canon(calls)


@SETTINGS
@given(CALLS, st.booleans())
def test_hermes(calls, single_quoted):
    def body(n, a):
        obj = {"name": n, "arguments": a}
        return repr(obj) if single_quoted else json.dumps(obj)  # some models emit Python-literal pseudo-JSON

    raw = "".join(f"<tool_call>\n{body(n, a)}\n</tool_call>\n" for n, a in calls)
    assert decoded(raw) == canon(calls)


@SETTINGS
@given(CALLS)
def test_granite(calls):
    raw = " ".join(f"<function_call> {json.dumps({'name': n, 'arguments': a})}" for n, a in calls)
    assert decoded(raw) == canon(calls)


@SETTINGS
@given(CALLS)
def test_glaive(calls):
    # The arguments are a JSON string written as a (single-quoted) string literal.
    raw = " ".join(f'<functioncall> {{"name": {json.dumps(n)}, "arguments": {json.dumps(a)!r}}}' for n, a in calls)
    assert decoded(raw + " <|endoftext|>") == canon(calls)


@SETTINGS
@given(CALLS)
def test_glm(calls):
    assert decoded("\n".join(f"{n}\n{json.dumps(a)}" for n, a in calls)) == canon(calls)


@SETTINGS
@given(CALLS, st.sampled_from(["arguments", "parameters"]))
def test_json_calls(calls, key):
    assert decoded(json.dumps([{"name": n, key: a} for n, a in calls])) == canon(calls)


# Java and JavaScript: values limited to what those literals can say.
JAVA_SCALAR = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.booleans(),
    st.none(),
)
JS_VALUE = st.recursive(
    JAVA_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(IDENT, inner, max_size=3)), max_leaves=8
)


def clike_literal(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(clike_literal(x) for x in v) + "]"
    return "{" + ", ".join(f"{k}: {clike_literal(x)}" for k, x in v.items()) + "}"


def clike_text(calls) -> str:
    return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={clike_literal(v)}" for k, v in a.items()) + ")" for n, a in calls) + "]"


@SETTINGS
@given(st.lists(st.tuples(NAME, st.dictionaries(IDENT, JAVA_SCALAR, max_size=4)), min_size=1, max_size=3))
def test_java(calls):
    assert decoded(clike_text(calls), language="java") == canon(calls)


@SETTINGS
@given(st.lists(st.tuples(NAME, st.dictionaries(IDENT, JS_VALUE, max_size=4)), min_size=1, max_size=3))
def test_javascript(calls):
    assert decoded(clike_text(calls), language="javascript") == canon(calls)


RAW_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=10,
)
CALLISH_TEXT = st.lists(
    st.sampled_from(["[", "]", "(", ")", "{", "}", "'", '"', ",", "=", ":", ";", "f", "a.b", "1", "true", "\\", "\n",
                     "```", "<tool_call>", "</tool_call>", "<|im_start|>", "<function_call>", "<functioncall>", " "]),
    max_size=30,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.one_of(RAW_JSON, TEXT, CALLISH_TEXT), st.sampled_from([None, "java", "javascript"]))
def test_decode_never_raises_and_says_why(raw, language):
    res = decode(raw, language=language)
    assert (res.calls is None) != (res.error is None)
    if res.calls is None:
        assert res.error.split(":", 1)[0] in ("no_call", "malformed") and res.decoder is None
    else:
        assert res.decoder and all(c.name for c in res.calls)


def test_a_marker_quoted_inside_a_call_body_is_data():
    """Found by test_hermes: a string value holding "<tool_call>" is not a second call."""
    raw = '<tool_call>\n{"name": "A", "arguments": {"A": {"<tool_call>": null}}}\n</tool_call>\n'
    assert decoded(raw) == canon([("A", {"A": {"<tool_call>": None}})])
    two = raw + '<tool_call>{"name": "B", "arguments": {"s": "see <tool_call> x"}}</tool_call>'
    assert decoded(two) == canon([("A", {"A": {"<tool_call>": None}}), ("B", {"s": "see <tool_call> x"})])


def test_special_tokens_inside_strings_are_data():
    """Found by test_python_with_surroundings: "<|_|>" inside an argument was stripped as a chat token."""
    from data.decoders.base import strip_special_tokens

    assert decoded("```python\n[A(A={'<|_|>': None})]\n```") == canon([("A", {"A": {"<|_|>": None}})])
    assert decoded("<|python_tag|>[f(a='x <|eot_id|> y')]<|eot_id|>") == canon([("f", {"a": "x <|eot_id|> y"})])
    assert strip_special_tokens("Here's the call: <|python_tag|>[f(a=1)]<|eom_id|>") == "Here's the call: [f(a=1)]"
    assert strip_special_tokens('{"a": "q\\"<|x|>"}<|eot_id|>') == '{"a": "q\\"<|x|>"}'
