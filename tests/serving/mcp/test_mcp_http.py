"""The MCP gateway's HTTP surface against a hostile caller: Host and Origin on every host, the key before any
redirect or group name, /healthz without an admin key, bodies over the bound, and (hypothesis) arbitrary methods,
paths, headers and bodies: never a 5xx or a traceback, every refusal a JSON-RPC error object.

    .venv/bin/python -m pytest -q tests/serving/mcp/test_mcp_http.py

A gateway on loopback over tests/serving/mcp/toy_server.py (the official SDK over stdio).
"""

from __future__ import annotations

import json
from urllib.parse import quote

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from serving.core.auth import KeyEntry, KeyStore
from serving.mcp.config import McpConfig
from tests.serving.mcp.conftest import gateway_on, toy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
ADMIN, PLAIN = "sk-sc-test-admin-0123456789abcdefg", "sk-sc-test-plain-0123456789abcdefg"
ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"


def keys() -> KeyStore:
    return KeyStore([KeyEntry(id="ops", key=ADMIN, caller={}, role="admin"), KeyEntry(id="plain", key=PLAIN, caller={})])


def headers(key: str | None = PLAIN, **more: str) -> dict[str, str]:
    out = {"accept": ACCEPT, "content-type": "application/json", "mcp-protocol-version": MODERN}
    if key:
        out["authorization"] = f"Bearer {key}"
    return {**out, **more}


def jsonrpc_refusal(r: httpx.Response) -> dict:
    """The error object of a refusal, checked to be JSON-RPC shaped."""
    body = r.json()
    assert body["jsonrpc"] == "2.0" and set(body) == {"jsonrpc", "id", "error"}, r.text
    assert isinstance(body["error"]["code"], int) and isinstance(body["error"]["message"], str), r.text
    return body["error"]


@pytest.fixture(scope="module")
def served(encoder, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp-http")
    with gateway_on(tmp, encoder, [toy(tmp)], keys=keys(), host="0.0.0.0",
                    allowed_hosts=["127.0.0.1:*", "mcp.example.com:*"]) as (gw, url):
        yield gw, url


def test_an_unauthenticated_server_beyond_loopback_is_refused_unless_insisted():
    with pytest.raises(ValueError) as e:
        McpConfig(host="0.0.0.0", auth={"mode": "none"})
    assert ("host '0.0.0.0' is not loopback and auth.mode is none: anyone who reaches the port could use every "
            "tool of auth.local_caller; use auth.mode: keys, or host: 127.0.0.1, or set "
            "auth.allow_unauthenticated_remote: true to insist") in str(e.value)
    assert McpConfig(host="0.0.0.0", auth={"mode": "none", "allow_unauthenticated_remote": True}).host == "0.0.0.0"
    assert McpConfig(host="127.0.0.1", auth={"mode": "none"}).transport_hosts()[0] == [
        "127.0.0.1:*", "localhost:*", "[::1]:*"]
    assert McpConfig(host="10.1.2.3").transport_hosts() == (
        ["127.0.0.1:*", "localhost:*", "[::1]:*", "10.1.2.3:*"],
        ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", "http://10.1.2.3:*", "https://10.1.2.3:*"])


def test_host_and_origin_are_checked_on_a_wildcard_host(served):
    _, url = served
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    port = url.rsplit(":", 1)[1]
    r = httpx.post(url + "/mcp", json=listing, headers=headers(host="evil.example"), timeout=30)
    assert r.status_code == 421 and jsonrpc_refusal(r)["message"] == "Invalid Host header (allowed_hosts)"
    r = httpx.post(url + "/mcp", json=listing, headers=headers(origin="http://evil.example"), timeout=30)
    assert r.status_code == 403 and jsonrpc_refusal(r)["message"] == "Invalid Origin header (allowed_origins)"
    assert anyio.run(names_as, url, f"mcp.example.com:{port}")[:2] == ["find_tools", "call_tool"]  # configured


async def names_as(url: str, host: str) -> list[str]:
    """tools/list through the SDK client, sending `Host: host`."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {PLAIN}", "host": host}, timeout=30) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            return [t.name for t in (await client.list_tools()).tools]


def test_a_trailing_slash_is_not_redirected_and_the_key_comes_first(served):
    _, url = served
    for path in ("/mcp/", "/mcp/toy/", "/nowhere"):
        r = httpx.post(url + path, content=b"{}", headers=headers(None, host="evil.example"), timeout=30)
        assert r.status_code == 401 and "location" not in r.headers and "evil.example" not in r.text, r.text
        assert jsonrpc_refusal(r)["message"] == "no API key: send the header `Authorization: Bearer <key>`"
        r = httpx.post(url + path, content=b"{}", headers=headers(host="evil.example"), timeout=30)
        assert r.status_code == 404 and "evil.example" not in r.text, r.text
        hint = f"; without the trailing slash: {path.rstrip('/')}" if path.endswith("/") else ""
        assert jsonrpc_refusal(r)["message"] == (f"no such endpoint: POST {path}{hint} (endpoints: /mcp, "
                                                 "/mcp/<group>, /healthz)")


def test_healthz_names_groups_and_servers_to_an_admin_key_only(served):
    _, url = served
    for key in (None, PLAIN, "sk-sc-wrong"):
        r = httpx.get(url + "/healthz", headers={"authorization": f"Bearer {key}"} if key else {}, timeout=30)
        assert (r.status_code, r.json()) == (200, {"status": "ok"})
    r = httpx.get(url + "/healthz", headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "ok" and body["groups"] == ["toy"]
    assert [u["name"] for u in body["upstreams"]] == ["toy"]


def test_a_body_over_max_body_bytes_is_413_with_or_without_a_length(served):
    _, url = served

    def chunks():
        for _ in range(20):
            yield b"x" * 100_000

    for content in (b"x" * 1_000_001, chunks()):
        r = httpx.post(url + "/mcp", content=content, headers=headers(), timeout=60)
        assert r.status_code == 413 and r.headers["connection"] == "close"
        assert jsonrpc_refusal(r) == {"code": -32600, "message": "request body is over 1,000,000 bytes "
                                      "(max_body_bytes)", "data": {"status": 413, "reason": "body_too_large"}}


# --- property: anything a caller sends --------------------------------------------------------------------------
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                           max_leaves=10)
METHODS = st.sampled_from(["tools/list", "tools/call", "initialize", "subscriptions/listen", "ping",
                           "notifications/initialized", "resources/list", "nope"]) | TEXT
MESSAGES = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0"]) | JSON_VALUES, "method": METHODS},
    optional={"id": st.integers() | TEXT | st.none() | JSON_VALUES, "params": JSON_VALUES | st.fixed_dictionaries(
        {"name": st.sampled_from(["find_tools", "call_tool", "toy__ping", "toy__sleep"]) | TEXT},
        optional={"arguments": JSON_VALUES, "_meta": JSON_VALUES})})
BODIES = (MESSAGES.map(lambda m: json.dumps(m).encode()) | st.lists(MESSAGES, max_size=3).map(
    lambda ms: json.dumps(ms).encode()) | st.binary(max_size=200) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=30).map(str.strip)
HEADERS = st.fixed_dictionaries({}, optional={
    "content-type": st.sampled_from(["application/json", "text/plain", "application/json; charset=utf-16"])
    | HEADER_VALUE,
    "accept": st.sampled_from([ACCEPT, "application/json", "text/event-stream", "*/*"]) | HEADER_VALUE,
    "mcp-protocol-version": st.sampled_from([MODERN, "2025-06-18", "2025-03-26", "1999-01-01"]) | HEADER_VALUE,
    "mcp-session-id": HEADER_VALUE, "origin": st.sampled_from(["http://127.0.0.1:1", "null"]) | HEADER_VALUE,
    "mcp-name": HEADER_VALUE, "mcp-method": HEADER_VALUE,
    "authorization": st.sampled_from([f"Bearer {PLAIN}", f"Bearer {ADMIN}", "Bearer", "Basic x"]) | HEADER_VALUE})


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(method=st.sampled_from(["POST", "POST", "POST", "GET", "DELETE", "PUT", "OPTIONS"]),
       path=st.sampled_from(["/mcp", "/mcp/toy", "/mcp/nope", "/mcp/", "/healthz"]) | TEXT.map(lambda t: "/" + quote(t)),
       head=HEADERS, body=BODIES)
@example(method="POST", path="/mcp", head={"authorization": f"Bearer {PLAIN}", "accept": ACCEPT,
                                           "content-type": "application/json", "mcp-protocol-version": MODERN},
         body=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "toy__sleep", '
              b'"arguments": {"s": "x"}}}')
def test_anything_a_caller_sends_gets_no_5xx_and_a_jsonrpc_error(served, method, path, head, body):
    _, url = served
    with httpx.Client(timeout=30) as client:
        r = client.request(method, url + path, content=body, headers=head)
    assert r.status_code < 500, (r.status_code, r.text)
    assert "Traceback" not in r.text
    if r.status_code >= 400:
        jsonrpc_refusal(r)
