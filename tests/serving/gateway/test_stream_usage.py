"""Every stream ends with its answer's usage, read by the official SDKs' stream helpers.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_stream_usage.py

Chat Completions streamed from a native model is the upstream's stream passed through (its usage chunk, then the
gateway's cost chunk: both carry `usage`, since the openai SDK keeps the last chunk's); from a prompt-style model
it is the answer read whole, one chunk. Messages and Responses streams are the finished answer as events, usage
in `message_start` / `message_delta` and `response.completed`.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from serving.app import create_app
from serving.gateway.config import ServingConfig
from tests.serving.gateway.helpers import A, POOL, TOP, pool_env
from tests.serving.helpers import KEY, Loopback

pytestmark = pytest.mark.integration
USAGE = {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47}


def chunks(model: str):
    """A native model's stream: two content deltas, the stop, then the usage chunk (no choices)."""
    base = {"id": "s", "object": "chat.completion.chunk", "created": 0, "model": model}
    for delta, finish in (({"role": "assistant", "content": "It is "}, None), ({"content": "sunny."}, None),
                          ({}, "stop")):
        yield f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': delta, 'finish_reason': finish}]})}\n\n"
    yield f"data: {json.dumps({**base, 'choices': [], 'usage': USAGE})}\n\n"
    yield "data: [DONE]\n\n"


@pytest.fixture(scope="module")
def gateway(client):
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def complete(request: Request):
        body = await request.json()
        if body.get("stream"):
            return StreamingResponse(chunks(body["model"]), media_type="text/event-stream")
        return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "usage": USAGE,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "It is sunny."},
                             "finish_reason": "stop"}]}

    mp = pytest.MonkeyPatch()
    pool_env(mp)
    with Loopback(upstream) as up:
        pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": up + "/v1"})
                                                  for m in POOL.models]})
        with Loopback(create_app(ServingConfig(), client=client, pool=pool)) as url:
            yield url
    mp.undo()


@pytest.mark.parametrize("model", [TOP, A])  # passed through, read whole
def test_a_chat_stream_ends_with_usage_for_the_sdk(gateway, model):
    client = openai.OpenAI(base_url=gateway + "/v1", api_key=KEY, max_retries=0)
    with client.chat.completions.stream(model=model, messages=[{"role": "user", "content": "Weather?"}],
                                        stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "It is sunny."
    assert (final.usage.prompt_tokens, final.usage.completion_tokens, final.usage.total_tokens) == (40, 7, 47)


@pytest.mark.parametrize("model", [TOP, A])
def test_a_messages_stream_ends_with_usage_for_the_sdk(gateway, model):
    client = anthropic.Anthropic(base_url=gateway, api_key=KEY, max_retries=0)
    with client.messages.stream(model=model, max_tokens=100,
                                messages=[{"role": "user", "content": "Weather?"}]) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "It is sunny."
    assert (final.usage.input_tokens, final.usage.output_tokens) == (40, 7)


@pytest.mark.parametrize("model", [TOP, A])
def test_a_responses_stream_ends_with_usage_for_the_sdk(gateway, model):
    client = openai.OpenAI(base_url=gateway + "/v1", api_key=KEY, max_retries=0)
    with client.responses.stream(model=model, input="Weather?") as stream:
        final = stream.get_final_response()
    assert final.output_text == "It is sunny."
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (40, 7, 47)
