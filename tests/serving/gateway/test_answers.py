"""Serving each model the way it was labelled: the upstream request per prompt style, the answer as OpenAI tool_calls.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_answers.py

Tiny requests built here; the builder is the pool runner's own (data/pool_runner/request.py),
the decoders those that labelled the recorded outputs.
"""

from __future__ import annotations

import json

import pytest

from data.pool import PoolModel, Prices
from data.pool_runner.request import PROMPT_SYSTEM
from data.wire.raw import WireError
from data.schema import Call
from serving.gateway.answers import read_answer, upstream_body
from serving.core.errors import GatewayError
from serving.gateway.requests import check_strategy, strategy_from, to_tools
from training.policy import Strategy

PRICES = Prices(input_per_mtok=1.0, output_per_mtok=2.0)
PROMPT = PoolModel(name="p", model_id="p-id", prices=PRICES, prompt_style="prompt")
NATIVE = PoolModel(name="n-FC", model_id="n", prices=PRICES, prompt_style="native")
FACTORIAL = {"type": "function", "function": {"name": "math.factorial", "description": "n!", "strict": True,
                                              "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                             "required": ["n"]}}}


def caller_body(**extra) -> dict:
    return {"model": "router", "temperature": 0.2, "max_tokens": 64, "metadata": {"example_id": "t:1"},
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "5 factorial?"}],
            "tools": [FACTORIAL], "tool_choice": "auto", "parallel_tool_calls": False,
            "switchcraft": {"max_cost_usd": 1.0}, **extra}


def completion(message: dict, usage: dict | None = None) -> dict:
    body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "x",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    if usage:
        body["usage"] = usage
    return body


def test_a_prompt_model_gets_the_functions_in_its_system_prompt_and_no_tools():
    body = caller_body(stream=True, stream_options={"include_usage": True})
    out = upstream_body(body, to_tools(body["tools"]), PROMPT)
    assert set(out) == {"model", "messages", "temperature", "max_tokens", "metadata"}
    assert (out["model"], out["temperature"], out["max_tokens"], out["metadata"]) == ("p-id", 0.2, 64, {"example_id": "t:1"})
    system, user = out["messages"]
    functions = json.dumps([FACTORIAL["function"]], ensure_ascii=False, indent=2)
    # The caller's own system message follows the function prompt (and its parallel_tool_calls: false), in one turn.
    assert system == {"role": "system", "content": PROMPT_SYSTEM.format(functions=functions)
                      + "Make exactly one function call.\n" + "\nBe brief."}
    assert user == body["messages"][1] and body["tools"] == [FACTORIAL]  # the caller's body is not touched


def test_a_native_model_gets_legal_names_everywhere_and_the_callers_fields():
    history = [{"role": "user", "content": "5 factorial?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c0", "type": "function", "function": {"name": "math.factorial", "arguments": '{"n": 5}'}}]},
               {"role": "tool", "tool_call_id": "c0", "content": "120"}, {"role": "user", "content": "and 6?"}]
    body = caller_body(messages=history, stream=True,
                       tool_choice={"type": "function", "function": {"name": "math.factorial"}})
    out = upstream_body(body, to_tools(body["tools"]), NATIVE)
    assert out["model"] == "n" and out["stream"] is True and out["parallel_tool_calls"] is False
    assert out["tools"] == [{"type": "function", "function": {
        "name": "math_factorial", "description": "n!", "strict": True, "parameters": FACTORIAL["function"]["parameters"]}}]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "math_factorial"}}
    assert out["messages"][1]["tool_calls"][0]["function"] == {"name": "math_factorial", "arguments": '{"n": 5}'}
    assert out["messages"][0] == history[0] and out["messages"][2:] == history[2:] and "switchcraft" not in out
    # No tools offered: nothing tool-shaped is invented.
    plain = upstream_body({"model": "router", "messages": [{"role": "user", "content": "hi"}]}, [], NATIVE)
    assert plain == {"model": "n", "messages": [{"role": "user", "content": "hi"}]}
    assert upstream_body({"model": "router", "messages": plain["messages"]}, [], PROMPT)["messages"] == plain["messages"]


def test_a_prompt_models_text_answer_becomes_openai_tool_calls():
    tools = to_tools([FACTORIAL])
    raw = "[math.factorial(n=5)]"
    answer = read_answer(completion({"role": "assistant", "content": raw},
                                    {"prompt_tokens": 100, "completion_tokens": 7}), PROMPT, tools)
    choice = answer.body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (tc,) = choice["message"]["tool_calls"]
    assert tc["type"] == "function" and tc["id"].startswith("call_")
    assert tc["function"] == {"name": "math.factorial", "arguments": '{"n": 5}'}
    assert answer.raw == raw and answer.calls == [Call(name="math.factorial", arguments={"n": 5})]
    assert answer.decoder == "python" and (answer.usage.input_tokens, answer.usage.output_tokens) == (100, 7)
    assert answer.body["id"] == "c1" and answer.body["usage"] == {"prompt_tokens": 100, "completion_tokens": 7}
    # Prose stays prose: no call, the text returned as it came.
    prose = read_answer(completion({"role": "assistant", "content": "I need the number first."}), PROMPT, tools)
    assert prose.calls == [] and prose.decode_error.startswith("no_call")
    assert prose.body["choices"][0]["message"] == {"role": "assistant", "content": "I need the number first."}
    assert prose.body["choices"][0]["finish_reason"] == "stop" and not prose.usage.known


def test_a_native_models_tool_calls_pass_as_they_came_under_the_callers_names():
    tools = to_tools([FACTORIAL])
    call = {"id": "call_abc", "type": "function", "function": {"name": "math_factorial", "arguments": '{"n":5}'}}
    answer = read_answer(completion({"role": "assistant", "content": None, "tool_calls": [call]}), NATIVE, tools)
    assert answer.body["choices"][0]["message"]["tool_calls"] == [
        {"id": "call_abc", "type": "function", "function": {"name": "math.factorial", "arguments": '{"n":5}'}}]
    assert answer.calls == [Call(name="math.factorial", arguments={"n": 5})] and answer.decoder == "native_fc"
    assert answer.raw == [{"math_factorial": '{"n":5}'}]  # what the model said, before any renaming
    # A native model's text is no call, whatever code it shows (the labelling rule).
    text = read_answer(completion({"role": "assistant", "content": "[math.factorial(n=5)]"}), NATIVE, tools)
    assert text.calls == [] and text.body["choices"][0]["message"]["content"] == "[math.factorial(n=5)]"
    assert "tool_calls" not in text.body["choices"][0]["message"]
    with pytest.raises(WireError):
        read_answer({"choices": [{"message": "not an object"}]}, NATIVE, tools)


def test_a_native_stream_gets_the_callers_tool_names_back():
    from serving.gateway.streams import caller_names_in_chunk

    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c", "function": {"name": "math_factorial", "arguments": ""}},
        {"index": 1, "function": {"arguments": '{"n": 5}'}},  # later deltas carry no name
        {"index": 2, "function": {"name": "unknown_tool"}}]}}]}
    caller_names_in_chunk(chunk, to_tools([FACTORIAL]))
    names = [tc["function"].get("name") for tc in chunk["choices"][0]["delta"]["tool_calls"]]
    assert names == ["math.factorial", None, "unknown_tool"]  # a name no tool matches stays as written


def test_strategies_a_request_or_the_config_asks_for_are_checked_against_the_pool():
    from pydantic import ValidationError

    from serving.gateway.config import ServingConfig

    pool = ["a", "b", "c", "d"]
    s = strategy_from({"first": ["a", "b"], "tie_breaker": "c", "escalate": ["d"]}, pool, "switchcraft.strategy")
    assert s == Strategy.agree("a", "b", tie_breaker="c", escalate=("d",))
    assert strategy_from({"first": ["a"], "escalate": ["b"]}, pool, "x") == Strategy.single("a", ("b",))
    for value, fragment in (({"first": ["a", "zz"], "escalate": ["d"]}, "switchcraft.strategy.first[1]: 'zz' is not in the pool"),
                            ({"first": ["a", "b"], "escalate": ["d"], "tie_breaker": "q"}, "tie_breaker: 'q'"),
                            ({"first": ["a", "b"]}, "needs a model to escalate to"),
                            ({"first": ["a", "a"], "escalate": ["d"]}, "two different models"),
                            ({"first": "a"}, "switchcraft.strategy.first: must be a list"),
                            ({"first": ["a"], "then": ["b"]}, "unknown field(s) ['then']"),
                            ({"kind": "nope", "first": ["a"]}, "switchcraft.strategy.kind: must be a strategy kind: single"),
                            ({"kind": "single", "first": ["a", "b"]}, "single calls one model first"),
                            ("agree", "must be an object")):
        with pytest.raises(GatewayError) as e:
            strategy_from(value, pool, "switchcraft.strategy")
        assert e.value.status == 400 and fragment in e.value.message, e.value.message
    with pytest.raises(ValueError, match=r"router.cascade.escalate\[0\]: 'nobody' is not in the pool"):
        check_strategy(Strategy.agree("a", "b", escalate=("nobody",)), pool, "router.cascade")
    cfg = ServingConfig(router={"cascade": {"first": ["a", "b"], "tie_breaker": "c", "escalate": ["d"]}})
    assert cfg.router.cascade.strategy() == s and ServingConfig().router.cascade is None
    named = {"kind": "agree", "first": ["a", "b"], "tie_breaker": "c", "escalate": ["d"]}
    assert ServingConfig(router={"cascade": named}).router.cascade.strategy() == s
    assert strategy_from(named, pool, "x") == s
    with pytest.raises(ValidationError, match="unknown strategy kind 'nope'"):
        ServingConfig(router={"cascade": {**named, "kind": "nope"}})
    with pytest.raises(ValidationError, match="needs a model to escalate to"):
        ServingConfig(router={"cascade": {"first": ["a", "b"]}})
