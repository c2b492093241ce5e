"""Wire format <-> Output.raw: the round trip the replay guarantee rests on.

.venv/bin/python -m pytest -q tests/data/wire/test_raw.py
"""

from __future__ import annotations

import json

import pytest

from data.wire.raw import (
    WireError,
    message_from_raw,
    parse_completion,
    raw_from_message,
    usage_from_wire,
    usage_to_wire,
)
from data.schema import Usage

SHAPES = [
    "[get_weather(city='Paris')]",
    "",
    [{"calc_area": '{"radius": 3}'}, {"calc_area": '{"radius": 4}'}],
    [{"polygon_area": {"vertices": [[1, 2], [3, 4.5]]}}],  # Cohere: arguments as an object
    ["## Day 1\n\n", {"velocity": '{"d": 5}'}, "\n\n## Day 2\n\n", {"velocity": '{"d": 6}'}, "end"],
    ["```python\nf(a=1)\n```"],  # Gemini: one text part, still a list
    [],
    "caf\u00e9 \ud83d\ude00 \ud800",  # non-ASCII, an emoji, a lone surrogate
]


@pytest.mark.parametrize("raw", SHAPES, ids=range(len(SHAPES)))
def test_round_trip_through_json(raw):
    wire = json.dumps({"choices": [{"message": message_from_raw(raw)}]})
    back, usage, _ = parse_completion(wire)
    assert json.dumps(back) == json.dumps(raw) and type(back) is type(raw)
    assert usage == Usage()


def test_message_shapes_are_openai_like():
    m = message_from_raw([{"f": '{"a": 1}'}])
    assert m["content"] is None and m["tool_calls"][0] == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'},
    }
    assert message_from_raw("hi") == {"role": "assistant", "content": "hi"}


def test_plain_openai_text_and_calls_together():
    msg = {
        "content": "Calling it.",
        "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "{}"}}],
    }
    assert raw_from_message(msg) == ["Calling it.", {"f": "{}"}]
    assert raw_from_message({"content": None}) == ""


def test_usage_reasoning_none_vs_zero():
    assert usage_to_wire(Usage()) is None
    w = usage_to_wire(Usage(input_tokens=10, output_tokens=5))
    assert w == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert usage_from_wire(w).reasoning_tokens is None
    o1 = {
        "prompt_tokens": 10,
        "completion_tokens": 900,
        "completion_tokens_details": {"reasoning_tokens": 850},
    }
    assert usage_from_wire(o1) == Usage(input_tokens=10, output_tokens=900, reasoning_tokens=850)
    assert usage_to_wire(usage_from_wire(o1))["completion_tokens_details"] == {
        "reasoning_tokens": 850
    }


@pytest.mark.parametrize(
    "body, match",
    [
        ("not json", "not JSON"),
        ('{"choices": []}', "no choices"),
        ('{"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}', "function.name"),
        ('{"choices": [{"message": {"content": [{"type": "image"}]}}]}', "unknown content part"),
    ],
)
def test_unreadable_responses(body, match):
    with pytest.raises(WireError, match=match):
        parse_completion(body)


@pytest.mark.slow
def test_every_recorded_output_round_trips(shared_data):
    """All 71 models x 1,630 recorded BFCL v1 results survive encode -> JSON -> decode unchanged."""
    root = shared_data / "bfcl_v1_pool_outputs_2024-08-11"
    n = 0
    for f in sorted(root.glob("*/*.json*")):
        for line in f.read_text(encoding="utf-8").splitlines():
            raw = json.loads(line)["result"]
            back = raw_from_message(json.loads(json.dumps(message_from_raw(raw))))
            assert json.dumps(back) == json.dumps(raw), (f, line[:120])
            n += 1
    assert n == 71 * 1630


def test_a_usage_count_that_is_not_a_whole_number_is_taken_as_not_given():
    """A provider's `input_tokens: -1` (found by the hypothesis test above) or a count as text is no count: the
    cost falls back to the estimate instead of the answer failing."""
    from data.wire.raw import usage_from_wire

    u = usage_from_wire({"prompt_tokens": -1, "completion_tokens": "7", "prompt_tokens_details": {"cached_tokens": True},
                         "completion_tokens_details": {"reasoning_tokens": 3}})
    assert (u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens) == (None, None, None, 3)
    assert usage_from_wire({"prompt_tokens": 5, "completion_tokens": 2}).input_tokens == 5
    assert usage_from_wire(["not", "a", "dict"]).input_tokens is None
