"""Fixtures of the gateway tests; tests/serving/conftest.py holds the examples, the router client and the replay
servers they share with the console's and the MCP gateway's tests.

Session-scoped where the tests only read: the cascade's questions and the queries picked from their recordings,
the tiny tool catalog's index. Module-scoped where a test changes state (replay servers count calls, upstreams
record bodies, a module's gateway keeps its limits); per test where a test starts its own gateways.
"""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request

from data.replay import Faults
from data.replay.serve import ReplayServer, build_state
from data.verify.agree import calls_agree
from serving.app import create_app
from serving.gateway.config import ServingConfig
from serving.gateway.tools import GatewayTools
from serving.tools.config import RetrievalConfig
from serving.tools.router import ToolRouter
from tests.catalogs import POLICY, build_tiny_index
from tests.serving.gateway.helpers import (A, ADMIN, B, FREE_KEY, KEYS, LIMITED_KEY, POOL, SUPPORT, TIE, TOP,
                                           replay_app, decoded, pool_env, tools_of)
from tests.serving.helpers import SECRET, Loopback, use_keys

LIMITS = {"max_messages": 6, "max_tools": 4, "max_body_bytes": 200_000}


@pytest.fixture
def replay_gateway(replay, client, monkeypatch):
    """(make(failing models, tool_selector, **config) -> URL, good replay, bad replay), every pool key set in the
    environment; the models in `failing` are sent to the replay server that fails every call."""
    good, bad = replay
    pool_env(monkeypatch)
    servers = []

    def make(failing: set[str] = frozenset(), tool_selector=None, **cfg) -> str:
        good.state.reset(), bad.state.reset()
        servers.append(Loopback(replay_app(client, good, bad, failing=failing, tool_selector=tool_selector, **cfg)))
        return servers[-1].__enter__()

    yield make, good, bad
    for s in servers:
        s.__exit__()


@pytest.fixture
def make_gateway(replay, client, monkeypatch):
    """make(**cfg) -> url of a gateway whose upstreams are the replay server; keys: the admin test key, FREE_KEY
    (no limits) and LIMITED_KEY (1 USD a day)."""
    good, _ = replay
    good.state.reset()
    pool_env(monkeypatch)
    use_keys(monkeypatch, {"id": "free", "key": FREE_KEY},
             {"id": "limited", "key": LIMITED_KEY, "limits": {"usd_per_day": 1.0}})
    servers = []

    def make(**cfg) -> str:
        servers.append(Loopback(replay_app(client, good, **cfg)))
        return servers[-1].__enter__()

    yield make
    for s in servers:
        s.__exit__()


@pytest.fixture(scope="session")
def cascade_examples(bfcl_examples):
    """The simple and multiple-function BFCL v1 questions: one call each, so two answers agree or they do not."""
    return [e for e in bfcl_examples if e.category in ("simple", "multiple_function")]


@pytest.fixture(scope="module")
def cascade_replay(cascade_examples, pool_recordings):
    """(good, bad, examples): replay servers over the cascade's questions; bad fails every call with a 500."""
    state = build_state(None, cascade_examples, pool=POOL, api_key=SECRET, recordings=pool_recordings)
    failing = build_state(None, cascade_examples, pool=POOL, api_key=SECRET, recordings=pool_recordings,
                          faults=Faults(rate_500=1.0, max_faults_per_call=100))
    with ReplayServer(state) as good, ReplayServer(failing) as bad:
        yield good, bad, cascade_examples


@pytest.fixture(scope="session")
def picked(cascade_examples, pool_recordings):
    """Real queries: the first models agree / disagree / disagree with a tie-breaker that sides with one."""
    state = build_state(None, cascade_examples, pool=POOL, api_key=SECRET, recordings=pool_recordings)
    out = {}
    for ex in cascade_examples:
        calls = {m: decoded(state, m, ex) for m in (A, B, TIE, TOP)}
        if any(c is None for c in calls.values()) or not calls[A] or not calls[B] or not calls[TOP]:
            continue
        tools = tools_of(ex)
        if calls_agree(tools, calls[A], calls[B]):
            # With a dotted function name: the prompt model writes it, the native one was offered a_b.
            if "." in ex.tools[0].name:
                out.setdefault("agree", ex)
        elif len(sided := [m for m in (A, B) if calls_agree(tools, calls[m], calls[TIE])]) == 1:
            out.setdefault("tie", ex)
            if sided == [B]:  # the tie-breaker sides with the dearer first model, and is cheaper than it
                out.setdefault("tie_b", ex)
        elif not calls_agree(tools, calls[TOP], calls[A]) and not calls_agree(tools, calls[TOP], calls[B]):
            out.setdefault("disagree", ex)
        if len(out) == 4:
            return out
    raise AssertionError(f"the recordings hold no query for {sorted({'agree', 'tie', 'tie_b', 'disagree'} - set(out))}")


@pytest.fixture(scope="module")
def served(cascade_replay, client):
    """(gateway URL, the replay server): one gateway for the module, every upstream the cascade's replay server."""
    good, _, _ = cascade_replay
    mp = pytest.MonkeyPatch()
    pool_env(mp)
    with Loopback(replay_app(client, good)) as url:
        yield url, good
    mp.undo()


@pytest.fixture(scope="module")
def plain_upstream():
    """(base URL, seen): answers every request with a plain message, whatever it holds; records the raw bodies."""
    seen: list[bytes] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict:
        seen.append(await request.body())
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}

    with Loopback(app) as url:
        yield url + "/v1", seen


@pytest.fixture(scope="module")
def plain_gateway(client, plain_upstream):
    """The URL of a gateway with tight limits (LIMITS) in front of plain_upstream; a message 'BOOM' makes its
    tool-selector hook raise (the unexpected-exception path)."""
    mp = pytest.MonkeyPatch()
    pool_env(mp)

    def selector(messages, tools, caller):
        if any(m.content == "BOOM" for m in messages):
            raise RuntimeError("selector broke on " + "-".join(["secret", "text"]))  # the text must not reach the log
        return [t.name for t in tools]

    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": plain_upstream[0]}) for m in POOL.models]})
    with Loopback(create_app(ServingConfig(**LIMITS), client=client, pool=pool, tool_selector=selector)) as url:
        yield url
    mp.undo()


@pytest.fixture(scope="session")
def tool_index(encoder, tmp_path_factory):
    """The tiny card catalog (tests/catalogs.py) indexed with the real MiniLM encoder."""
    return build_tiny_index(encoder, tmp_path_factory)


@pytest.fixture
def tool_gateway(client, tool_upstream, tool_index, monkeypatch):
    """(URL, seen): a gateway whose tool router runs on tool_index, in front of tool_upstream; one API key per
    identity (KEYS: support, admin, acme)."""
    base_url, seen = tool_upstream
    pool_env(monkeypatch, {"id": "support", "key": KEYS["support"], "caller": SUPPORT},
             {"id": "admin", "key": KEYS["admin"], "caller": ADMIN}, {"id": "acme", "key": KEYS["acme"],
                                                                     "caller": {"tenant": "acme"}})
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": base_url}) for m in POOL.models]})
    tools = GatewayTools(ToolRouter(tool_index, POLICY, RetrievalConfig(top_k=3)))
    servers = []
    seen.clear()
    servers.append(Loopback(create_app(ServingConfig(), client=client, pool=pool, tools=tools)))
    yield servers[0].__enter__(), seen
    servers[0].__exit__()
