"""Shared fixtures of the serving tests (the gateway's, the console's, the MCP gateway's).

Built once a session, because the tests only read them: six real BFCL v1 examples and the tiny exported router's
client (tests/conftest.py builds the router). Built once a module, because tests change their state: a real
Redis, the replay servers (real recorded answers, one good and one failing every call) and a recording upstream.
"""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request

from data.replay import Faults
from data.replay.serve import ReplayServer, build_state
from serving.client import RouterClient
from tests.routers import bfcl_sample
from tests.serving.helpers import SECRET, Loopback


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real redis-server on loopback (the binary the test extra installs; evaluation/harness.py)."""
    from evaluation.harness import LocalRedis

    server = LocalRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def examples(shared_data):
    """Six BFCL v1 examples: every category first (tests.routers.bfcl_sample)."""
    return bfcl_sample(shared_data, 6)


@pytest.fixture(scope="session")
def client(exported):
    """The tiny exported router's client; the gateways that tests start share it and never close it."""
    return RouterClient.from_dir(exported[0], threads=1)


@pytest.fixture(scope="module")
def replay(examples, default_pool, pool_recordings):
    """(good, bad): replay servers answering `examples` from the pool's recordings; bad fails every call with a 500."""
    state = build_state(None, examples, pool=default_pool, api_key=SECRET, recordings=pool_recordings)
    failing = build_state(None, examples, pool=default_pool, api_key=SECRET, recordings=pool_recordings,
                          faults=Faults(rate_500=1.0, max_faults_per_call=100))
    with ReplayServer(state) as good, ReplayServer(failing) as bad:
        yield good, bad


@pytest.fixture(scope="module")
def tool_upstream():
    """(base URL, seen): an OpenAI-style upstream that records each forwarded body and answers with a plain message,
    or with a call of the tool a question `CALL <name>` names."""
    seen: list[dict] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict:
        body = await request.json()
        seen.append(body)
        text = body["messages"][-1]["content"]
        message = {"role": "assistant", "content": "ok"}
        if text.startswith("CALL "):  # the model calls the tool named in the question
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "t0", "type": "function", "function": {"name": text[5:], "arguments": "{}"}}]}
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}

    with Loopback(app) as url:
        yield url + "/v1", seen
