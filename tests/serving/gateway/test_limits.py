"""The gateway's bounds under load: a locked state file, caller-sized fields, heavy bodies beside /healthz.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_limits.py

Real parts: the gateway on loopback (uvicorn) with its state in a SQLite file, another process holding that
file locked, the replay server answering as every upstream with the recorded BFCL v1 outputs; the clients
are real HTTP clients, eight at once.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import httpx
import pytest

from data.pool import load_pool
from serving.core.state import SQLiteState, utc_day
from tests.routers import REPO
from tests.serving.gateway.helpers import FREE_KEY, LIMITED_KEY
from tests.serving.helpers import AUTH, bearer, openai_body, post

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")
CHEAP = "gpt-4o-mini-2024-07-18"
LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
db.execute("INSERT INTO rate (key_id, t) VALUES ('lock', 0)")
print("locked", flush=True)
sys.stdin.read()
"""


async def timed_posts(url: str, bodies: list[tuple[str, dict, dict]]) -> list[tuple[httpx.Response, float]]:
    """Every (path, body, headers) posted at once; each answer with its own seconds."""
    async with httpx.AsyncClient(timeout=120) as http:
        async def one(path, body, headers):
            t0 = time.perf_counter()
            r = await http.post(url + path, json=body, headers=headers)
            return r, time.perf_counter() - t0
        return await asyncio.gather(*(one(*b) for b in bodies))


def test_a_locked_state_file_stalls_no_key_without_limits_and_refuses_limited_keys_quickly(make_gateway, examples,
                                                                                          tmp_path):
    """Another process holds the SQLite file locked: eight requests at once of a key without limits are served
    without waiting for it (their charges land once the lock is gone, none lost); eight of a key with limits get
    the limit store's 503, in each API's error shape, within the store's deadline (not one after another)."""
    busy_s = 0.4 * 5  # state.timeout_s × 5: SQLite's deadline per call
    url = make_gateway(state={"path": str(tmp_path / "state"), "timeout_s": 0.4, "settle_retry_s": 120})
    db = tmp_path / "state" / "state.sqlite"
    locker = subprocess.Popen([sys.executable, "-c", LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        free = [("/v1/chat/completions", openai_body(examples[i % len(examples)], model=CHEAP), bearer(FREE_KEY))
                for i in range(8)]
        answers = asyncio.run(timed_posts(url, free))
        assert [r.status_code for r, _ in answers] == [200] * 8, [r.text[:200] for r, _ in answers]
        slowest = max(s for _, s in answers)
        assert slowest < busy_s, f"a key without limits waited {slowest:.1f} s for a locked store"

        limited = [("/v1/chat/completions", openai_body(examples[0], model=CHEAP), bearer(LIMITED_KEY))] * 7
        limited.append(("/v1/messages", {"model": CHEAP, "max_tokens": 64,
                                         "messages": [{"role": "user", "content": "weather in Paris?"}]},
                        bearer(LIMITED_KEY)))
        refused = asyncio.run(timed_posts(url, limited))
        assert [r.status_code for r, _ in refused] == [503] * 8, [r.text[:200] for r, _ in refused]
        slowest = max(s for _, s in refused)
        assert slowest < busy_s + 1.5, f"a key with limits waited {slowest:.1f} s before its 503"
        for r, _ in refused[:7]:
            assert r.json()["error"]["type"] == "state_unavailable" and "limit store" in r.json()["error"]["message"]
            assert r.headers["retry-after"] == "2"
        anthropic = refused[7][0].json()
        assert anthropic["type"] == "error" and anthropic["error"]["type"] == "overloaded_error"
        assert "limit store" in anthropic["error"]["message"]
    finally:
        locker.stdin.close()
        locker.wait(timeout=10)

    deadline = time.monotonic() + 60  # the charges of the free key's eight requests, retried until they land
    while True:
        report = httpx.get(url + "/v1/admin/spend", params={"key": "free"}, headers=AUTH, timeout=10).json()
        calls = sum(t["calls"] for t in report["totals"])
        if calls >= 8 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert calls == 8 and {r["request_id"] for r in report["rows"]} == {r.headers["x-request-id"] for r, _ in answers}

    async def held():
        store = SQLiteState(db)
        try:
            return await store.day_total("free", utc_day(time.time()))
        finally:
            await store.aclose()
    assert asyncio.run(held())[1] == pytest.approx(0.0)  # no hold left behind to expire as a worst-case charge


# --- caller-sized fields -----------------------------------------------------------------------------------------
def tool(schema: dict, name: str = "f") -> dict:
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": schema}}


def nested(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


USER = [{"role": "user", "content": "weather in Paris?"}]
BOUNDS = {"max_tools": 3, "max_enum_values": 10, "max_schema_depth": 4, "max_metadata_bytes": 100,
          "max_body_bytes": 50_000}


@pytest.mark.parametrize("body, status, param, fragment", [
    ({"tools": [tool({"type": "object"}, f"f{i}") for i in range(4)]}, 400, "tools", "the limit is 3 (max_tools)"),
    ({"tools": [tool({"type": "object", "properties": {"x": {"type": "string", "enum": [str(i) for i in range(11)]}}})]},
     400, "tools[0].function.parameters.properties.x.enum", "has 11 values; the limit is 10 (max_enum_values)"),
    ({"tools": [tool({"type": "object", "properties": {"x": {"type": "array", "items": {"enum": list(range(11))}}}})]},
     400, "tools[0].function.parameters.properties.x.items.enum", "the limit is 10 (max_enum_values)"),
    ({"tools": [tool(nested(5))]}, 400, None, "the limit is 4 (max_schema_depth)"),
    ({"metadata": {"note": "x" * 200}}, 400, "metadata", "the limit is 100 (max_metadata_bytes)"),
    ({"metadata": {"note": "x" * 60_000}}, 413, "body", "the limit is 50,000 (max_body_bytes)"),
])


def test_caller_sized_fields_are_refused_naming_the_field_and_the_limit(make_gateway, body, status, param, fragment):
    url = make_gateway(**BOUNDS)
    for path in ("/v1/chat/completions", "/v1/route"):
        r = post(url + path, json={"model": "router", "messages": USER, **body}, timeout=30)
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert fragment in error["message"] and error["param"] == (param or error["param"])
        assert error["param"].startswith("tools[0].function.parameters.properties.a") if param is None else True
    within = {"tools": [tool(nested(4)), tool({"type": "object", "properties": {"x": {"enum": list(range(10))}}}, "g")],
              "metadata": {"note": "x" * 60}}
    assert post(url + "/v1/route", json={"messages": USER, **within}, timeout=30).status_code == 200


def test_the_bounds_name_the_field_in_each_apis_own_body(make_gateway):
    """Anthropic's tools carry `input_schema`, Responses' a flat `parameters`: the 400 names the caller's path."""
    url = make_gateway(**BOUNDS)
    enum = {"type": "object", "properties": {"x": {"enum": list(range(11))}}}
    r = post(url + "/v1/messages", json={"model": "router", "max_tokens": 64, "messages": USER,
                                         "tools": [{"name": "f", "input_schema": enum}]}, timeout=30)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["message"].startswith("tools[0].input_schema.properties.x.enum: has 11 values")
    r = post(url + "/v1/responses", json={"model": "router", "input": "weather in Paris?",
                                          "tools": [{"type": "function", "name": "f", "parameters": enum}]}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].parameters.properties.x.enum"
    r = post(url + "/v1/messages", json={"model": "router", "max_tokens": 64, "messages": USER,
                                         "metadata": {"user_id": "u" * 200}}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("metadata: is ")


def test_healthz_answers_quickly_while_heavy_bodies_are_read(make_gateway, examples):
    """Heavy bodies (a 1.8 MB metadata, a 100,000-value enum, a 1.9 MB conversation) four at a time for a few
    seconds: /healthz keeps answering within 0.5 s, and the bounds refuse the first two at once."""
    url = make_gateway()
    base = openai_body(examples[0], model=CHEAP)
    heavy = [
        {**base, "metadata": {f"k{i}": "v" * 900 for i in range(2_000)}},
        {**base, "tools": [tool({"type": "object", "properties": {"x": {"enum": [f"v{i}" for i in range(100_000)]}}})]},
        {**base, "messages": [{"role": "user", "content": "weather in Paris and Rome? " * 70_000}]},
    ]
    raws = [json.dumps(b).encode() for b in heavy]
    assert all(900_000 < len(r) < 2_000_000 for r in raws)
    stop, statuses, errors = threading.Event(), [], []

    def load() -> None:
        with httpx.Client(timeout=120, headers={**AUTH, "content-type": "application/json"}) as http:
            i = 0
            while not stop.is_set():
                try:
                    statuses.append(http.post(url + "/v1/chat/completions", content=raws[i % len(raws)]).status_code)
                except httpx.HTTPError as e:
                    errors.append(repr(e))
                i += 1

    workers = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    waits = []
    try:
        time.sleep(0.5)
        end = time.monotonic() + 4.0
        with httpx.Client(timeout=30) as http:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                assert http.get(url + "/healthz").status_code == 200
                waits.append(time.perf_counter() - t0)
                time.sleep(0.05)
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=120)
    assert max(waits) < 0.5, f"/healthz took up to {max(waits):.2f} s (median {sorted(waits)[len(waits) // 2]:.3f})"
    assert not errors and statuses and all(s in (200, 400) for s in statuses), (errors, statuses)
    assert 400 in statuses and 200 in statuses
    r = post(url + "/v1/chat/completions", json=heavy[0], timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata"
    r = post(url + "/v1/chat/completions", json=heavy[1], timeout=30)
    assert r.json()["error"]["param"] == "tools[0].function.parameters.properties.x.enum"
