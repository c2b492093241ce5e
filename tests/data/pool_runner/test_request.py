"""Request building (native vs prompt styles), the request hash, and the replay server's matching.

.venv/bin/python -m pytest -q tests/data/pool_runner/test_request.py
"""

from __future__ import annotations

import collections

import pytest

from data.pool import PoolModel, Prices
from data.pool_runner.request import (
    build_request,
    idempotency_key,
    native_tools,
    openai_function_name,
    request_hash,
)
from data.replay.recordings import ExampleIndex
from data.schema import Example, Expected, Message, Tool

PRICES = Prices(input_per_mtok=1, output_per_mtok=2)


def _example(q="What is 5 factorial?", names=("math.factorial",), ex_id="t:1") -> Example:
    tools = [
        Tool(
            name=n,
            description=f"doc of {n}",
            parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
            original={
                "name": n,
                "parameters": {"type": "dict", "properties": {"n": {"type": "integer"}}},
            },
        )
        for n in names
    ]
    return Example(
        id=ex_id,
        source="t",
        category="simple",
        messages=[Message(role="user", content=q)],
        tools=tools,
        expected=Expected.nothing(),
    )


def test_native_style_sends_tools_with_legal_names():
    body = build_request(
        _example(), PoolModel(name="m-FC", model_id="m", prices=PRICES, prompt_style="native")
    )
    assert body["model"] == "m" and body["messages"] == [
        {"role": "user", "content": "What is 5 factorial?"}
    ]
    assert body["tools"][0]["function"]["name"] == "math_factorial"
    assert body["tools"][0]["function"]["parameters"]["properties"] == {"n": {"type": "integer"}}
    assert "temperature" not in body and "max_tokens" not in body and "metadata" not in body


def test_prompt_style_puts_original_docs_in_a_system_prompt():
    body = build_request(
        _example(),
        PoolModel(
            name="m", prices=PRICES, prompt_style="prompt", temperature=0.0, max_output_tokens=64
        ),
    )
    assert "tools" not in body and body["temperature"] == 0.0 and body["max_tokens"] == 64
    system, user = body["messages"]
    assert system["role"] == "system" and '"name": "math.factorial"' in system["content"]
    assert (
        '"type": "dict"' in system["content"]
    )  # the benchmark's own doc, as BFCL's prompt models saw it
    assert user == {"role": "user", "content": "What is 5 factorial?"}


def test_request_hash_names_what_is_asked():
    m = PoolModel(name="m", prices=PRICES)
    a = build_request(_example(), m)
    assert request_hash(a) == request_hash(build_request(_example(), m))
    assert request_hash(a) != request_hash(build_request(_example(q="What is 6 factorial?"), m))
    assert request_hash(a) != request_hash(
        build_request(_example(), m.model_copy(update={"temperature": 0.5}))
    )
    # metadata does not change the answer, so it does not change the hash
    with_meta = build_request(_example(), m.model_copy(update={"send_metadata": True}))
    assert with_meta["metadata"] == {"example_id": "t:1"} and request_hash(
        with_meta
    ) == request_hash(a)
    assert idempotency_key("t:1", "m", request_hash(a)) != idempotency_key(
        "t:2", "m", request_hash(a)
    )


def test_multi_turn_tool_messages_answer_their_calls():
    from data.pool_runner.request import chat_messages
    from data.schema import Call

    ex = _example().model_copy(
        update={
            "messages": [
                Message(role="user", content="weather in Paris and Rome?"),
                Message(
                    role="assistant",
                    tool_calls=[
                        Call(name="w", arguments={"city": "Paris"}),
                        Call(name="w", arguments={"city": "Rome"}),
                    ],
                ),
                Message(role="tool", content="18C", name="w"),
                Message(role="tool", content="24C", name="w"),
                Message(role="user", content="and Oslo?"),
            ]
        }
    )
    msgs = chat_messages(ex)
    assert msgs[1]["content"] is None and [c["id"] for c in msgs[1]["tool_calls"]] == [
        "call_1_0",
        "call_1_1",
    ]
    assert msgs[1]["tool_calls"][1]["function"] == {"name": "w", "arguments": '{"city": "Rome"}'}
    assert [(m["tool_call_id"], m["content"]) for m in msgs[2:4]] == [
        ("call_1_0", "18C"),
        ("call_1_1", "24C"),
    ]
    assert msgs[4] == {"role": "user", "content": "and Oslo?"}


def test_function_names():
    assert openai_function_name("a.b-c_d") == "a_b-c_d"
    assert openai_function_name("x" * 80) == "x" * 64
    assert [t["type"] for t in native_tools(_example().tools)] == ["function"]


@pytest.mark.parametrize("style", ["native", "prompt"])
def test_index_tells_reused_questions_apart(style):
    simple = _example("Solve x", ["solve_quadratic"], "t:simple_4")
    multi = _example("Solve x", ["get_stock", "solve_quadratic", "geo.area"], "t:multiple_96")
    index = ExampleIndex([simple, multi, _example("Other", ["f"], "t:2")])
    m = PoolModel(name="m", prices=PRICES, prompt_style=style)
    assert index.match(build_request(simple, m)) == "t:simple_4"
    assert index.match(build_request(multi, m)) == "t:multiple_96"
    assert index.match({"messages": [{"role": "user", "content": "never asked"}]}) is None
    assert index.match({"metadata": {"example_id": "t:2"}, "messages": []}) == "t:2"


def test_index_matches_every_bfcl_v1_request(shared_data):
    """All 1,630 BFCL v1 queries (99 questions asked twice) map back to their own example, both styles."""
    from data.sources import read_source

    examples = read_source("bfcl_v1", str(shared_data / "bfcl_v1"))
    index = ExampleIndex(examples)
    twice = [q for q, k in collections.Counter(e.question for e in examples).items() if k > 1]
    assert len(twice) == 99
    for style in ("native", "prompt"):
        m = PoolModel(name="m", prices=PRICES, prompt_style=style)
        wrong = [e.id for e in examples if index.match(build_request(e, m)) != e.id]
        assert wrong == [], (style, wrong[:5])
