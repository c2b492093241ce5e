"""Plain helpers of the gateway tests (fixtures live in conftest.py).

The cascade's models (A and B first, TIE the tie-breaker, TOP the escalation) and what the gateway makes of their
recorded answers; the tool-routing test identities; hostile request bodies for the property tests; the ledger's
rows for a request.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from hypothesis import strategies as st

from data.decoders import decode
from data.pool import load_pool
from data.pool_runner.request import openai_function_name
from data.verify.batch import is_text
from serving.app import create_app
from serving.gateway.config import ServingConfig
from serving.gateway.requests import to_tools
from tests.routers import REPO
from tests.serving.helpers import AUTH, SECRET, bearer, openai_body, use_keys

A, B = "gpt-4o-mini-2024-07-18", "gemini-1.5-flash-preview-0514"  # prompt style, native
TIE, TOP = "claude-3-haiku-20240307", "gpt-4o-2024-08-06-FC"  # prompt style, native
POOL = load_pool(REPO / "configs" / "pool.yaml")
OUTPUTS = "bfcl_v1_pool_outputs_2024-08-11"


def pool_env(monkeypatch, *keys: dict) -> None:
    """Every pool model's provider key and the gateway's keys (the test key, and `keys`: more entries) in the
    environment, as an operator sets them."""
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    use_keys(monkeypatch, *keys)


def replay_app(client, good, bad=None, *, failing=frozenset(), prices: dict | None = None, apis: dict | None = None,
               cascade: dict | None = None, observers=None, tool_selector=None, **cfg):
    """A gateway app whose every pool model is answered by the replay server `good` (`bad` for those in `failing`),
    with prices and provider APIs per model where given, and `router.cascade` pinned when given."""
    models = [m.model_copy(update={"base_url": (bad if m.name in failing else good).base_url,
                                   "prices": (prices or {}).get(m.name, m.prices),
                                   "api": (apis or {}).get(m.name, m.api)}) for m in POOL.models]
    if cascade is not None:
        cfg["router"] = {**cfg.get("router", {}), "cascade": cascade}
    return create_app(ServingConfig(**cfg), client=client, pool=POOL.model_copy(update={"models": models}),
                      observers=observers, tool_selector=tool_selector)


def decoded(state, model: str, ex) -> list | None:
    """What the gateway will make of a model's recorded answer: its calls ([] for none), None if unrecorded."""
    rec = state.recordings[POOL.get(model).recording].get(ex.id)
    if rec is None or not rec.usage.known:
        return None
    if POOL.get(model).prompt_style == "native" and is_text(rec.raw):
        return []
    return decode(rec.raw, tools_of(ex)).calls or []


def tools_of(ex):
    return to_tools(openai_body(ex)["tools"])


def cost_of(state, model: str, ex) -> float:
    return POOL.cost_usd(model, state.recordings[POOL.get(model).recording][ex.id].usage)


SUPPORT = {"tenant": "acme", "roles": ["support"]}
ADMIN = {"tenant": "acme", "roles": ["admin"]}
# One API key per identity: the key decides who a request is; the body's caller may only narrow it.
KEYS = {"support": "sk-sc-test-support-0123456789abcdef", "admin": "sk-sc-test-admin-0123456789abcdefgh",
        "acme": "sk-sc-test-acme-tenant-0123456789abcdef"}
AS_SUPPORT, AS_ADMIN, AS_ACME = bearer(KEYS["support"]), bearer(KEYS["admin"]), bearer(KEYS["acme"])
FORBIDDEN_FOR_SUPPORT = {"payments.refund_payment", "payments.charge_card", "invoices.issue_invoice",
                         "ops.restart_service", "ops.service_status"}
# The limits tests' keys: one without limits, one allowed 1 USD a day.
FREE_KEY, LIMITED_KEY = "sk-sc-test-free-0123456789abcdefghij", "sk-sc-test-limited-0123456789abcdefgh"


def offered(body: dict, exposed: list[str]) -> list[dict]:
    """The function definitions an upstream was offered, under the catalog's names: a native model's `tools`
    (OpenAI-legal names, mapped back), or the functions a prompt-style model's system prompt lists."""
    if "tools" in body:
        back = {openai_function_name(n): n for n in exposed}
        return [{**t["function"], "name": back.get(t["function"]["name"], t["function"]["name"])} for t in body["tools"]]
    system = body["messages"][0]
    assert system["role"] == "system" and "tools" not in body
    return json.loads(system["content"].split("that you can invoke.\n", 1)[1])


def ledger(url: str, rid: str) -> list[dict]:
    r = httpx.get(url + "/v1/admin/spend", params={"key": "test"}, headers=AUTH, timeout=10)
    return [row for row in r.json()["rows"] if row["request_id"] == rid]


def expected(good, model: str, ex) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in decoded(good.state, model, ex)]


def agrees_with_ledger(url: str, headers, trace: dict) -> None:
    """The body's cost, the headers' and the ledger's rows for this request: one figure."""
    rows = ledger(url, headers["x-request-id"])
    assert rows and sum(r["usd"] for r in rows) == pytest.approx(float(headers["x-switchcraft-cost-usd"]), abs=1e-8)
    assert trace["charged_usd"] == pytest.approx(float(headers["x-switchcraft-cost-usd"]), abs=1e-8)
    assert {r["model"] for r in rows} == {c["model"] for c in trace["calls"] if c["outcome"] == "ok"}


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "array", "items": {"type": "integer"}}},
    "required": ["city"]}}}
USER = {"role": "user", "content": "weather in Paris?"}


def assert_names_the_field(r: httpx.Response, body_keys: set[str] | None) -> None:
    assert r.status_code < 500, r.text
    if r.status_code < 400:
        return
    error = r.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    param = error["param"]
    assert isinstance(param, str) and param, r.text
    top = re.split(r"[.\[]", param)[0]
    assert top in (body_keys or set()) | {"body", "model", "messages"}, (param, body_keys)


# --- the property test -----------------------------------------------------------------------------------
def nested(depth: int) -> st.SearchStrategy:
    return st.just(json.loads("[" * depth + "]" * depth)) if depth < 900 else st.just([])


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.text(alphabet=st.characters(categories=["Cs", "Co", "Cc", "Zs"]), max_size=8))


HOSTILE = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=5)),
                       max_leaves=12) | st.integers(80, 160).flatmap(nested) | st.just([USER] * 7) | st.just([TOOL] * 5)


def set_path(body: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    node = body
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def post_edited(url: str, body: dict, edits: list) -> httpx.Response:
    """`body` with each (dotted path, value) edit applied — values copied, an edit whose parent an earlier one
    replaced skipped (the body is hostile anyway) — posted as raw JSON (NaN allowed) with the test key."""
    for path, value in edits:
        try:
            set_path(body, path, json.loads(json.dumps(value, allow_nan=True)))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            pass
    return httpx.post(url, content=json.dumps(body, allow_nan=True).encode(), timeout=60,
                      headers={**AUTH, "content-type": "application/json"})


def assert_overhead(headers, elapsed_ms: float, trace: dict | None = None) -> float:
    """The answer's x-switchcraft-overhead-ms: at least 0, at most what the client waited less the longest upstream
    call of the trace (the upstream's time is not the gateway's; 5 ms for reading its answer)."""
    own = float(headers["x-switchcraft-overhead-ms"])
    upstream = max((c["latency_ms"] for c in (trace or {}).get("calls", []) if c.get("latency_ms")), default=0.0)
    assert 0 <= own <= elapsed_ms - upstream + 5.0, (own, elapsed_ms, upstream)
    return own
