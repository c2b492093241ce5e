"""Agent sessions: naming, the cache-priced switch rule, state in the store (two replicas on one Redis), tools
that grow in a stable order, expired sessions deleted, and the gateway keeping a session's model on real recorded
answers.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_sessions.py
"""

from __future__ import annotations

import asyncio
import time

import pytest

from data.pool import Pool
from serving.gateway.apis import registry
from serving.gateway.sessions import (CACHE_TTL_S, HEADER, Session, SessionState, SessionStore, keep_or_switch,
                                      session_name)
from serving.core.state import RedisState, SQLiteState
from serving.policy import Decision

POOL = Pool.model_validate({"models": [
    {"name": "big", "prices": {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cached_input_per_mtok": 0.3,
                               "cache_write_per_mtok": 3.75}},
    {"name": "mid", "prices": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}},
    {"name": "small", "prices": {"input_per_mtok": 0.25, "output_per_mtok": 1.25}},
    {"name": "flat", "prices": {"usd_per_query": 0.001}}]})
FIRST = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
API = {a.endpoint: a for a in registry.apis()}  # chat, messages, responses
TOOLS = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]


def decision(chosen: str, costs: dict[str, float], excluded: dict | None = None) -> Decision:
    ranking = [chosen] + sorted(m for m in costs if m != chosen)
    return Decision(chosen, "rule", 0.5, {m: 0.9 for m in costs}, costs, ranking, excluded or {})


def session(model: str | None, prefix: int, age_s: float = 1.0) -> Session:
    return Session("s", "header", SessionState(model, prefix, 3, time.time() - age_s))


def test_a_session_is_named_by_header_then_user_id_then_its_first_turns():
    turn2 = {"messages": FIRST + [{"role": "assistant", "content": "Looking."}, {"role": "user", "content": "go"}],
             "tools": TOOLS}
    assert session_name({HEADER: "abc"}, turn2, API["chat"]) == ("abc", "header")
    assert session_name({}, {**turn2, "user": "user_1"}, API["messages"]) == ("user_1", "metadata.user_id")
    name, how = session_name({}, turn2, API["chat"])
    assert how == "first_turns" and len(name) == 32
    turn3 = {**turn2, "messages": turn2["messages"] + [{"role": "assistant", "content": "Done."},
                                                       {"role": "user", "content": "thanks"}]}
    assert session_name({}, turn3, API["responses"])[0] == name  # later turns: the same session
    other = {**turn2, "messages": [FIRST[0], {"role": "user", "content": "Other task."}] + turn2["messages"][2:]}
    assert session_name({}, other, API["chat"])[0] != name
    assert session_name({}, {"messages": FIRST, "tools": TOOLS}, API["chat"]) is None  # a lone first turn: no session


# What the real clients send on every turn (captured from Claude Code 2.1.332 and Codex CLI 0.171.0 through the
# gateway): Claude Code's session id in a header and in metadata.user_id, Codex's in a header and prompt_cache_key.
CLAUDE_SESSION = "cce402b8-b336-452b-a48d-e9ee3baea634"
CLAUDE_USER_ID = ('{"device_id":"63c18a9bd90829bdc973ec09d7f3e79220cd76d5d044290fdfc5197aa3b838f5",'
                  f'"account_uuid":"","session_id":"{CLAUDE_SESSION}"}}')
CODEX_SESSION = "01a24269-54c0-7362-b1b1-adeef6387033"


@pytest.mark.parametrize("endpoint", ["chat", "messages", "responses"])
def test_the_agent_clients_own_session_ids_name_a_session_from_its_first_turn(endpoint):
    first = {"messages": FIRST, "tools": TOOLS}
    api = API[endpoint]
    assert session_name({"x-claude-code-session-id": CLAUDE_SESSION}, first, api) == (
        CLAUDE_SESSION, "x-claude-code-session-id")
    assert session_name({"session-id": CODEX_SESSION}, first, api) == (CODEX_SESSION, "session-id")
    assert session_name({HEADER: "mine", "session-id": CODEX_SESSION}, first, api) == ("mine", "header")
    # Without the headers: the ids in the bodies, each only where its client sends it.
    named = session_name({}, {**first, "user": CLAUDE_USER_ID}, api)
    assert named == ((CLAUDE_SESSION, "metadata.user_id.session_id") if endpoint == "messages" else None)
    older = session_name({}, {**first, "user": f"user_ab12_account__session_{CLAUDE_SESSION}"}, api)
    assert older == ((CLAUDE_SESSION, "metadata.user_id.session_id") if endpoint == "messages" else None)
    by_key = session_name({}, {"messages": FIRST}, api, {"prompt_cache_key": CODEX_SESSION})
    assert by_key == (None if endpoint == "messages" else (CODEX_SESSION, "prompt_cache_key"))


def test_the_previous_model_is_kept_while_its_cache_makes_it_cheaper():
    prefix, tokens = 20_000, 25_000  # big saw 20,000 of this turn's 25,000 tokens; cached at 0.3 instead of 3.0
    costs = {"big": 0.01, "mid": 0.01, "small": 0.03, "flat": 0.001}
    s = session("big", prefix)
    kept = keep_or_switch(POOL, s, decision("mid", costs), time.time(), tokens)
    assert kept.first == ("big",) and kept.escalate == ("mid", "flat", "small") and kept.kind == "single"
    assert s.trace["rule"] == "kept" and s.trace["router_chose"] == "mid"
    assert s.trace["stay_usd"] == pytest.approx(0.01 + (5_000 * 3.0 + 20_000 * 0.3) / 1e6)  # 0.031
    assert s.trace["switch_usd"] == pytest.approx(0.01 + 25_000 * 2.5 / 1e6)  # 0.0725: the prefix paid again
    assert s.trace["cache_saving_usd"] == pytest.approx(20_000 * 2.7 / 1e6)
    # the router's choice cheaper even after paying the prefix again: switch
    s = session("big", prefix)
    assert keep_or_switch(POOL, s, decision("small", {**costs, "big": 0.07}), time.time(), tokens) is None
    assert s.trace["rule"] == "switched" and s.trace["switch_usd"] == pytest.approx(0.03 + 25_000 * 0.25 / 1e6)
    # switching onto a model whose cache write costs more pays that surcharge too
    s = session("small", prefix)
    assert keep_or_switch(POOL, s, decision("big", {**costs, "small": 0.05}), time.time(), tokens) is not None
    assert s.trace["cache_write_usd"] == pytest.approx(prefix * 0.75 / 1e6) and s.trace["rule"] == "kept"
    assert s.trace["switch_usd"] == pytest.approx(0.01 + (25_000 * 3.0 + 20_000 * 0.75) / 1e6)


@pytest.mark.parametrize("prev, age, excluded, rule", [
    (None, 1.0, {}, "new"), ("big", CACHE_TTL_S + 1, {}, "cache_expired"), ("small", 1.0, {}, "same_model"),
    ("big", 1.0, {"big": "cost over cap"}, "previous_not_eligible")])


def test_the_router_decides_when_there_is_no_cache_to_keep(prev, age, excluded, rule):
    s = session(prev, 20_000, age)
    costs = {"big": 0.07, "small": 0.03}
    assert keep_or_switch(POOL, s, decision("small", costs, excluded), time.time(), 25_000) is None
    assert s.trace["rule"] == rule


def test_a_model_not_priced_per_token_has_no_cache_saving():
    s = session("flat", 20_000)
    assert keep_or_switch(POOL, s, decision("small", {"flat": 0.001, "small": 0.03}), time.time(), 25_000)
    assert s.trace["cache_saving_usd"] == 0 and s.trace["stay_usd"] == pytest.approx(0.001)


def test_session_state_in_sqlite_and_shared_by_two_replicas_on_one_redis(redis_server, tmp_path):
    async def go():
        state = SessionState("big", 1234, 2, time.time(), ["srv.a", "srv.b"])
        sqlite = SessionStore(SQLiteState(tmp_path / "state.sqlite"))
        await sqlite.put("s1", state, time.time())
        assert await SessionStore(SQLiteState(tmp_path / "state.sqlite")).get("s1", time.time()) == state
        assert await sqlite.get("s1", time.time() + 10 * 86400) is None  # forgotten once idle
        # a newer replica's state, with a field this one does not know: read, the field left out
        await sqlite.store.session_put("s3", '{"model": "big", "turns": 4, "shown_at": [1]}', now=time.time(),
                                       ttl_s=60)
        assert await sqlite.get("s3", time.time()) == SessionState("big", 0, 4)
        prefix = f"t{time.time_ns()}."
        one, two = (SessionStore(RedisState(redis_server.url, prefix=prefix)) for _ in range(2))
        await one.put("s2", state, time.time())
        assert await two.get("s2", time.time()) == state
        assert await two.get("nobody", time.time()) is None
        for s in (one, two):
            await s.store.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("where", ["file", "memory"])
def test_expired_sessions_are_deleted_after_a_later_write_and_their_pages_reused(where, tmp_path):
    from serving.core.state import StateSettings
    from serving.core.state import open_state

    def rows(store) -> int:
        return store.db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]

    async def round_of(store, t0: float, n: int) -> None:
        for i in range(n):
            await store.session_put(f"s{t0}-{i}", '{"turns": 1}', now=t0, ttl_s=2.0)
        if store.pruning is not None:
            await store.pruning

    async def go():
        path = str(tmp_path) if where == "file" else None
        store = open_state(StateSettings(path=path, session_prune_every_s=1.0, session_prune_batch=300))
        t0 = 1_000_000.0
        await round_of(store, t0, 1_000)  # the first write pruned an empty table; the rest within a second
        assert rows(store) == 1_000
        await round_of(store, t0 + 0.5, 1)  # nothing expired yet, and the last prune is recent
        assert rows(store) == 1_001
        await round_of(store, t0 + 3.0, 1)  # all expired: deleted in batches of 300 behind this write
        assert rows(store) == 1
        assert await store.session_get("s1000003.0-0", t0 + 3.0) == '{"turns": 1}'
        if where == "file":  # a second wave of as many sessions fits in the pages the first one freed
            size = (tmp_path / "state.sqlite").stat().st_size + (tmp_path / "state.sqlite-wal").stat().st_size
            await round_of(store, t0 + 6.0, 1_000)
            await round_of(store, t0 + 9.0, 1_000)
            assert rows(store) == 1_000
            store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            assert (tmp_path / "state.sqlite").stat().st_size <= size * 1.1
        await store.aclose()

    asyncio.run(go())


def test_the_decision_log_keeps_the_api_and_the_session_and_adds_them_to_an_older_log(tmp_path):
    import sqlite3

    from data.logged import FILE
    from serving.core.decision_log import DecisionLog
    from serving.core.log_queue import request_row
    from serving.core.record import Served

    old = sqlite3.connect(tmp_path / FILE)  # a log written before the columns existed
    old.execute("CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, request_id TEXT "
                "NOT NULL, key_id TEXT, router_version TEXT, kind TEXT NOT NULL, status INTEGER, example_id TEXT, "
                "routed INTEGER, chosen TEXT, rule TEXT, strategy TEXT, verdict TEXT, kinds TEXT, answered_by TEXT, "
                "cost_usd REAL, latency_ms REAL, stream INTEGER, request TEXT)")
    old.close()
    served = Served("r1", "k", time.time(), 1.0, 200, "v1",
                    meta={"api": "messages", "session": {"id": "abc", "turn": 2}, "routed": True})
    row = request_row(served, False)
    assert (row["api"], row["session"]) == ("messages", "abc")
    assert request_row(Served("r2", "k", 0.0, 1.0, 200, "v1"), False)["api"] == "chat"
    log = DecisionLog(tmp_path)
    log.write([("request", row, [])])
    got = log.db.execute("SELECT api, session FROM requests WHERE request_id = 'r1'").fetchone()
    assert got == ("messages", "abc")
    log.db.close()


def test_a_slow_store_turns_the_session_off_without_stalling_the_request(monkeypatch):
    from types import SimpleNamespace

    from serving.gateway.sessions import open_session

    gw = SimpleNamespace(cfg=SimpleNamespace(state=SimpleNamespace(unlimited_wait_s=0.05)), state=object())

    async def slow(self, sid, now):
        await asyncio.sleep(2)

    monkeypatch.setattr(SessionStore, "get", slow)
    t0 = time.monotonic()
    assert asyncio.run(open_session(gw, {HEADER: "run-1"}, {}, API["chat"], "k")) is None
    assert time.monotonic() - t0 < 1.0


def test_the_previous_model_must_pass_the_decisions_own_rule_cache_priced_in():
    from serving.policy import Decision

    def good_enough(decision, prev, priced):
        return decision.accepts(prev, priced["stay_usd"], priced["switch_usd"])

    costs = {"a": 0.001, "b": 0.002}
    priced = {"stay_usd": 0.0012, "switch_usd": 0.0020}
    tau = Decision("a", "cheapest_confident", 0.8, {"a": 0.9, "b": 0.79}, costs, ["a", "b"])
    assert not good_enough(tau, "b", priced)  # below τ: never kept, however cheap its cache
    assert good_enough(Decision("a", "cheapest_confident", 0.8, {"a": 0.9, "b": 0.81}, costs, ["a", "b"]), "b", priced)
    lam = Decision("a", "lambda", 0.5, {"a": 0.90, "b": 0.85}, costs, ["a", "b"], lam=0.01)
    assert good_enough(lam, "b", priced)  # 0.01·0.85 − 0.0012 ≥ 0.01·0.90 − 0.0020
    assert not good_enough(lam, "b", {"stay_usd": 0.0012, "switch_usd": 0.0010})
    assert not good_enough(Decision("a", "most_probable", 0.95, {"a": 0.9, "b": 0.8}, costs, ["a", "b"]), "b", priced)
