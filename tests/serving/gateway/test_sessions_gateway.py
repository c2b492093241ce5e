"""Sessions through the gateway: two replicas on one Redis keep a session on one model (real recorded BFCL v1
answers from the replay server), and the tool router's tools for a session never reorder or shrink.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_sessions_gateway.py
"""

from __future__ import annotations

import time

import pytest

from serving.app import create_app
from serving.gateway.config import ServingConfig
from serving.gateway.sessions import HEADER
from serving.gateway.tools import GatewayTools
from serving.tools.config import RetrievalConfig
from serving.tools.router import ToolRouter
from tests.catalogs import POLICY
from tests.serving.gateway.helpers import ADMIN, AS_ADMIN, KEYS, POOL, pool_env
from tests.serving.helpers import Loopback, openai_body, post

pytestmark = pytest.mark.integration


def turn(ex, model: str, answer: str = "Working on it.", **extra) -> dict:
    """The example's question as a second turn of a conversation (an assistant turn before it)."""
    body = openai_body(ex, model, **extra)
    body["messages"] = [{"role": "user", "content": "Help me with a task."},
                        {"role": "assistant", "content": answer}] + body["messages"]
    return body


def test_two_replicas_on_one_redis_keep_a_session_on_the_model_that_served_it(cascade_replay, client, picked,
                                                                             redis_server, monkeypatch):
    good, _, _ = cascade_replay
    pool_env(monkeypatch)
    # Cached input at a tenth of the price, as providers bill it: staying on a cached model is worth something.
    models = [m.model_copy(update={"base_url": good.base_url, "prices": m.prices.model_copy(update={
        "cached_input_per_mtok": (m.prices.input_per_mtok or 0) / 10} if m.prices.kind == "token" else {})})
        for m in POOL.models]
    pool = POOL.model_copy(update={"models": models})
    state = {"redis_url": redis_server.url, "redis_prefix": f"t{time.time_ns()}."}
    ex = picked["agree"]
    with (Loopback(create_app(ServingConfig(state=state), client=client, pool=pool)) as one,
          Loopback(create_app(ServingConfig(state=state), client=client, pool=pool)) as two):
        routed = post(one + "/v1/chat/completions", json=turn(ex, "router"), timeout=60).json()["switchcraft"]
        chosen = routed["chosen"]
        assert "session" in routed and routed["session"]["rule"] == "new"  # named by its first turns
        # the session's first turn served by another model (named), on replica one
        prev = next(m for m in routed["decision"]["ranking"][1:] if pool.get(m).prices.kind == "token")
        h = {HEADER: "agent-run-42"}
        r = post(one + "/v1/chat/completions", json=turn(ex, prev), headers=h, timeout=60)
        assert r.status_code == 200 and r.json()["switchcraft"]["session"]["turn"] == 1
        # the next turn, routed, on replica two: the session's state came through Redis
        r = post(two + "/v1/chat/completions", json=turn(ex, "router", answer="Step one done."), headers=h,
                 timeout=60)
        assert r.status_code == 200, r.text
        s = r.json()["switchcraft"]["session"]
        assert s["turn"] == 2 and s["named_by"] == "header"
        kept = s["switch_usd"] >= s["stay_usd"]
        assert s["rule"] == ("kept" if kept else "switched") and s["cache_saving_usd"] > 0
        assert r.headers["x-switchcraft-model"] == (prev if kept else chosen)
        assert (r.json()["switchcraft"]["strategy"]["source"] == "session") is kept
        # and replica one sees the turn replica two served
        r = post(one + "/v1/chat/completions", json=turn(ex, "router", answer="Step two done."), headers=h,
                 timeout=60)
        assert r.json()["switchcraft"]["session"]["turn"] == 3


def test_a_sessions_tools_never_reorder_or_shrink(client, tool_upstream, tool_index, monkeypatch):
    base_url, seen = tool_upstream
    pool_env(monkeypatch, {"id": "admin", "key": KEYS["admin"], "caller": ADMIN})
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": base_url}) for m in POOL.models]})
    tools = GatewayTools(ToolRouter(tool_index, POLICY, RetrievalConfig(top_k=3)))
    native = next(m.name for m in POOL.models if m.prompt_style == "native")
    questions = ["What is the weather forecast in Paris?", "Issue an invoice to ACME for the repair",
                 "Refund the payment of order 7", "What is the weather forecast in Rome?"]
    with Loopback(create_app(ServingConfig(), client=client, pool=pool, tools=tools)) as url:
        shown: list[list[str]] = []
        messages: list[dict] = []
        for q in questions:
            seen.clear()
            messages += [{"role": "user", "content": q}]
            r = post(url + "/v1/chat/completions", json={"model": native, "messages": messages},
                     headers={**AS_ADMIN, HEADER: "tools-session"}, timeout=60)
            assert r.status_code == 200, r.text
            shown.append([t["function"]["name"] for t in seen[-1]["tools"]])
            messages += [{"role": "assistant", "content": "ok"}]
    for before, after in zip(shown, shown[1:]):
        kept = [n for n in before if n != "request_group"]
        assert after[:len(kept)] == kept, (before, after)  # every tool shown stays, in its place
    assert len(set(shown[-1])) > len(set(shown[0]))  # and the list grew as the asks changed


def test_a_sessions_tools_stay_within_max_tools_the_longest_unused_leaving(client, tool_upstream, tool_index,
                                                                          monkeypatch):
    base_url, seen = tool_upstream
    pool_env(monkeypatch, {"id": "admin", "key": KEYS["admin"], "caller": ADMIN})
    pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": base_url}) for m in POOL.models]})
    tools = GatewayTools(ToolRouter(tool_index, POLICY, RetrievalConfig(top_k=2)), max_tools=3)
    native = next(m.name for m in POOL.models if m.prompt_style == "native")
    questions = ["What is the weather forecast in Paris?", "Issue an invoice to ACME for the repair",
                 "Refund the payment of order 7", "List the invoices of ACME", "Charge the card of ACME"]
    with Loopback(create_app(ServingConfig(), client=client, pool=pool, tools=tools)) as url:
        shown: list[list[str]] = []
        messages: list[dict] = []
        for i, q in enumerate(questions):
            seen.clear()
            messages += [{"role": "user", "content": q}]
            r = post(url + "/v1/chat/completions", json={"model": native, "messages": messages},
                     headers={**AS_ADMIN, HEADER: "bounded-tools"}, timeout=60)
            assert r.status_code == 200, r.text
            shown.append([t["function"]["name"] for t in seen[-1]["tools"] if t["function"]["name"] != "request_group"])
            if i == 1:  # the model calls the invoice tool shown last: in use, it outlives the earlier ones
                called = shown[1][-1]
                messages += [{"role": "assistant", "content": None, "tool_calls": [{
                    "id": "c1", "type": "function", "function": {"name": called, "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
            else:
                messages += [{"role": "assistant", "content": "ok"}]
    assert all(len(s) <= 3 for s in shown), shown
    assert len({n for s in shown for n in s}) > 3  # more tools were routed than fit: some had to leave
    for before, after in zip(shown, shown[1:]):
        stayed = [n for n in before if n in after]
        assert after[:len(stayed)] == stayed, (before, after)  # who stays keeps its place, before the new ones
    assert "issue_invoice" in called and len(shown[1]) == 3
    assert shown[2][0] == called and shown[1][0] not in shown[2]  # the called one stays, the earliest unused went
