"""Agent sessions: a conversation's turns stay on one model while its provider's prompt cache is worth more than a
switch, and the tools shown to it grow in a stable order (up to `tools.max_tools`).

    session = await open_session(gw, request, body, api, ident)     # None: no session (a lone first turn)
    asked = grow_tools(gw, asked, session)                           # tool routing: earlier tools kept, in order
    strategy = keep_or_switch(gw.pool, session, decision, now)       # the previous model, unless switching pays
    await remember(gw, session, run)                                 # the model that served, its prefix, the turn

Naming, the first that a request holds: the `x-switchcraft-session` header;
the agent clients' own session ids — Claude Code's `x-claude-code-session-id`
header, Codex's `session-id` header; on POST /v1/messages the `session_id` in
Claude Code's `metadata.user_id`; on Chat Completions and Responses
`prompt_cache_key` (Codex sends its session id); on Messages the whole
`metadata.user_id` (each API says which of its fields name a session:
`session_user`, `session_cache_key`, serving/gateway/apis/); else, once the conversation is past its first turn (it
holds an assistant message), the hash of its first turns: system + first user
message + tools. A first turn nobody named has no session, so single requests
route as before. Sessions are per API key: two keys never share one.

State (model, prefix tokens, turns, the time of the last turn, the tool-router
keys shown) lives in the gateway's state store beside the budgets (SQLite, or
Redis shared by every replica; `state.session_ttl_s` idle), so replicas agree; a store that is down, or
slower than `state.unlimited_wait_s`, turns sessions off for that request (a
late write finishes in the background), never fails or stalls it.

The switch rule prices the cache. Last turn's model saw a prefix of P tokens
(its input and output: what this turn sends again) of this turn's N input
tokens; within the provider's cache lifetime (`state.cache_ttl_s`) staying costs the
router's expected cost for it plus (N − P) × its input price + P × its cached
input price, and switching costs the router's expected cost for its choice plus
N × its input price (the prefix paid again) + P × its cache write surcharge
(cache write price − input price). The router's costs are per query, profiled
on single-turn traffic; the input of an agent's turn is priced on top from its
size, so a long conversation weighs what it really costs. The previous model is kept
unless the switch is cheaper, or it is no longer eligible (the constraints
exclude it). Only the decision's own single-model strategy is kept or switched:
a strategy the request or the operator names runs as asked. Past the cache
lifetime the router's choice runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from data.pool import Pool
from serving.core.state import StateSettings
from serving.core.state import StateUnavailable
from serving.gateway.apis import Api
from training.policy import Strategy

log = logging.getLogger("switchcraft.gateway")
HEADER = "x-switchcraft-session"
# The agent clients' own session ids, sent on every turn: Claude Code's, and Codex's (its prompt_cache_key too).
CLIENT_HEADERS = ("x-claude-code-session-id", "session-id")
OLD_USER_ID = re.compile(r"_session_([0-9A-Za-z-]+)$")
SESSION_TTL_S = StateSettings.model_fields["session_ttl_s"].default  # the defaults of `state.session_ttl_s`
CACHE_TTL_S = StateSettings.model_fields["cache_ttl_s"].default  # and `state.cache_ttl_s`
MAX_NAME = 200


@dataclass
class SessionState:
    """What a session keeps between turns."""

    model: str | None = None  # the model that served the last turn
    prefix_tokens: int = 0  # what that model saw and said: the prefix this turn sends again
    turns: int = 0
    last_at: float = 0.0  # time.time() of the last turn
    tools: list[str] = field(default_factory=list)  # tool-router keys shown so far, in first-shown order
    used: dict[str, int] = field(default_factory=dict)  # tool key -> the last turn it was routed to or called
    messages: int = 0  # the messages the last turn's request held (calls after them are new)


FIELDS = set(SessionState.__dataclass_fields__)


@dataclass
class Session:
    id: str  # key id + name, hashed
    named_by: str  # header | x-claude-code-session-id | session-id | metadata.user_id[.session_id] | prompt_cache_key | first_turns
    state: SessionState
    trace: dict[str, Any] = field(default_factory=dict)
    cache_ttl_s: float = CACHE_TTL_S  # how long its provider keeps the prefix cached

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "named_by": self.named_by, "turn": self.state.turns + 1, **self.trace}


def session_name(headers, body: dict[str, Any], api: Api,
                 caller: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """(name, how it was named), or None when the request starts no session. `body`: the chat request; `api`: the
    caller's (which of its fields name a session); `caller`: the body as the caller sent it (a Responses body's
    `prompt_cache_key` is not in the chat request)."""
    for header in (HEADER, *CLIENT_HEADERS):
        if given := headers.get(header):
            return given[:MAX_NAME], "header" if header == HEADER else header
    user = body.get("user") if api.session_user else None
    if isinstance(user, str) and (part := _session_part(user)):
        return part[:MAX_NAME], "metadata.user_id.session_id"
    key = (caller if caller is not None else body).get("prompt_cache_key")
    if api.session_cache_key and isinstance(key, str) and key:
        return key[:MAX_NAME], "prompt_cache_key"
    if isinstance(user, str) and user:
        return user[:MAX_NAME], "metadata.user_id"
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if not any(m.get("role") == "assistant" for m in messages):
        return None
    system = [m.get("content") for m in messages if m.get("role") in ("system", "developer")][:1]
    first_user = next((m.get("content") for m in messages if m.get("role") == "user"), None)
    tools = sorted((json.dumps(t, sort_keys=True, default=str) for t in body.get("tools") or []))
    text = json.dumps([system, first_user, tools], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32], "first_turns"


def _session_part(user_id: str) -> str | None:
    """The session in Claude Code's `metadata.user_id`: `{"device_id", "account_uuid", "session_id"}` as JSON,
    or (older versions) `user_<hash>_account_<uuid>_session_<uuid>`."""
    if user_id.startswith("{"):
        try:
            parsed = json.loads(user_id)
        except ValueError:
            return None
        part = parsed.get("session_id") if isinstance(parsed, dict) else None
        return part if isinstance(part, str) and part else None
    found = OLD_USER_ID.search(user_id)
    return found.group(1) if found else None


def session_id(key_id: str | None, name: str) -> str:
    return hashlib.sha256(f"{key_id or ''}\x00{name}".encode()).hexdigest()[:32]


class SessionStore:
    """Session states in the gateway's state store (its `session_get` / `session_put`: a `sessions` table of its
    SQLite file, expiring `session:<id>` keys of its Redis), forgotten `ttl_s` after their last turn."""

    def __init__(self, store, ttl_s: float = SESSION_TTL_S) -> None:
        self.store, self.ttl_s = store, ttl_s

    async def get(self, sid: str, now: float) -> SessionState | None:
        raw = await self.store.session_get(sid, now)
        if not raw:
            return None
        # Fields a newer replica wrote that this one does not know are left out (replicas upgrade one at a time).
        return SessionState(**{k: v for k, v in json.loads(raw).items() if k in FIELDS})

    async def put(self, sid: str, state: SessionState, now: float) -> None:
        await self.store.session_put(sid, json.dumps(asdict(state)), now=now, ttl_s=self.ttl_s)


def store_of(gw) -> SessionStore:
    """The gateway's session store (made on first use, over its state store)."""
    stores = gw.__dict__.setdefault("_sessions", {})
    if id(gw.state) not in stores:
        stores[id(gw.state)] = SessionStore(gw.state, getattr(gw.cfg.state, "session_ttl_s", SESSION_TTL_S))
    return stores[id(gw.state)]


async def open_session(gw, headers, body: dict[str, Any], api: Api, key_id: str | None,
                       caller: dict[str, Any] | None = None) -> Session | None:
    """The request's session and its state (a fresh one when new); None when it has none or the store is down."""
    named = session_name(headers, body, api, caller)
    if named is None:
        return None
    sid = session_id(key_id, named[0])
    try:
        state = await bounded(gw, store_of(gw).get(sid, time.time()))
    except (StateUnavailable, TimeoutError) as e:
        log.warning(json.dumps({"event": "session_unavailable", "op": "get", "error": str(e) or "timed out"}))
        return None
    return Session(sid, named[1], state or SessionState(),
                   cache_ttl_s=getattr(gw.cfg.state, "cache_ttl_s", CACHE_TTL_S))


LATE: set[asyncio.Task] = set()  # store calls a request stopped waiting for, left to finish


async def bounded(gw, call):
    """`call`'s result, waited for as long as a key without limits waits for the state store
    (`state.unlimited_wait_s`); TimeoutError after that, the call finishing in the background."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=getattr(gw.cfg.state, "unlimited_wait_s", 0.25))
    if not done:
        LATE.add(task)
        task.add_done_callback(lambda t: (LATE.discard(t), t.cancelled() or t.exception()))
        raise TimeoutError("the state store did not answer in time")
    return task.result()


def cached(session: Session, now: float) -> bool:
    """Is the last turn's prefix still in its provider's cache?"""
    st = session.state
    return st.model is not None and st.prefix_tokens > 0 and now - st.last_at <= session.cache_ttl_s


def switch_costs(pool: Pool, prev: str, chosen: str, prefix: int, tokens: int,
                 costs: dict[str, float]) -> dict[str, float]:
    """Expected USD of this turn on `prev` (the `prefix` of its `tokens` input read from its cache at the cached
    price, the rest at the input price) and on `chosen` (every input token at full price, the prefix written to its
    cache), each on top of the router's expected cost for the model (`costs`: its profiled cost per query)."""
    def per_token(model: str):
        p = pool.get(model).prices
        return p if p.kind == "token" else None

    prefix = min(prefix, tokens)
    old, new = per_token(prev), per_token(chosen)
    stay = ((tokens - prefix) * old.input_per_mtok + prefix * old.cached_input_price) / 1e6 if old else 0.0
    saving = prefix * (old.input_per_mtok - old.cached_input_price) / 1e6 if old else 0.0
    surcharge = prefix * max(new.cache_write_price - new.input_per_mtok, 0.0) / 1e6 if new else 0.0
    switch = tokens * new.input_per_mtok / 1e6 + surcharge if new else 0.0
    return {"stay_usd": costs[prev] + stay, "switch_usd": costs[chosen] + switch, "cache_saving_usd": saving,
            "cache_write_usd": surcharge}


def keep_or_switch(pool: Pool, session: Session | None, decision, now: float, tokens: int) -> Strategy | None:
    """The strategy to run instead of the decision's (the previous model first, the ranking after it), or None
    to run the decision's; `tokens`: this turn's input tokens (estimated). The reason goes in `session.trace`."""
    if session is None:
        return None
    prev, chosen = session.state.model, decision.chosen
    if prev is None:
        session.trace["rule"] = "new"
        return None
    if not cached(session, now):
        session.trace["rule"] = "cache_expired"
        return None
    if prev == chosen:
        session.trace["rule"] = "same_model"
        return None
    if prev in decision.excluded or prev not in decision.costs or prev not in pool.names:
        session.trace["rule"] = "previous_not_eligible"
        return None
    priced = switch_costs(pool, prev, chosen, session.state.prefix_tokens, tokens, decision.costs)
    session.trace.update({k: round(v, 10) for k, v in priced.items()}, input_tokens=tokens)
    # A cache never keeps a session on a model the router's own rule would not accept.
    if not decision.accepts(prev, priced["stay_usd"], priced["switch_usd"]):
        session.trace["rule"] = "previous_below_the_rule"
        return None
    if priced["switch_usd"] < priced["stay_usd"]:
        session.trace["rule"] = "switched"
        return None
    session.trace.update(rule="kept", kept=prev, router_chose=chosen)
    return Strategy.single(prev, tuple(m for m in decision.ranking if m != prev))


def grow_tools(gw, asked, session: Session | None):
    """`asked` with the tool router's tools for this session: those shown on earlier turns that this caller may
    still see first (in the order first shown), then this turn's new ones; request_group stays last. Past
    `tools.max_tools` the tools unused longest (neither routed to nor called) leave; the rest keep their order,
    so a provider's prompt cache keeps all of the list before the first one that left."""
    tooled = asked.tooled
    if session is None or tooled is None:
        return asked
    from data.pool_runner.request import openai_function_name
    from data.schema import Tool
    from serving.tools.catalog import REQUEST_GROUP

    router, d, st = gw.tools.router, tooled.decision, session.state
    cards = router.catalog.cards
    index = {c.key: i for i, c in enumerate(cards)}
    seen = router.visible(asked.who).visible
    keys = [k for k in st.tools if k in index and seen[index[k]]]
    keys += [k for k in d.tool_keys if k not in keys]
    turn, by_name = st.turns + 1, {}
    for k in keys:  # a call names the tool as the caller saw it, or as the provider did
        name = cards[index[k]].to_openai()["function"]["name"]
        by_name[name] = by_name[openai_function_name(name)] = k
    st.used = {k: st.used.get(k, 0) for k in keys}
    for k in d.tool_keys:
        st.used[k] = turn
    # Calls in the messages added since the last turn (all of them, when the conversation was shortened).
    for m in asked.messages[st.messages if st.messages <= len(asked.messages) else 0:]:
        for call in m.tool_calls:
            if call.name in by_name:
                st.used[by_name[call.name]] = turn
    st.messages = len(asked.messages)
    keys = bounded_tools(keys, st.used, gw.tools.max_tools)
    group = [t for t in d.tools if t["function"]["name"] == REQUEST_GROUP]
    d.tools = [cards[index[k]].to_openai() for k in keys] + group
    d.tool_keys = keys
    tooled.openai = d.tools
    tooled.tools = [Tool(name=t["function"]["name"], description=t["function"].get("description", ""),
                         parameters=t["function"].get("parameters") or {"type": "object", "properties": {}},
                         original=t["function"]) for t in d.tools]
    asked.tools = tooled.tools
    return asked


def bounded_tools(keys: list[str], used: dict[str, int], limit: int) -> list[str]:
    """`keys` without the ones unused longest beyond `limit`, in order (among equals the latest shown leave: the
    prefix a provider cached stays longer)."""
    if len(keys) <= limit:
        return keys
    place = {k: i for i, k in enumerate(keys)}
    kept = set(sorted(keys, key=lambda k: (-used.get(k, 0), place[k]))[:limit])
    return [k for k in keys if k in kept]


async def remember(gw, session: Session | None, run, tools: list[str] | None) -> None:
    """After a turn: the model that answered, the prefix it now holds (its input and output tokens), the turn,
    the tools shown. A store that is down keeps the old state (the next turn routes per call)."""
    if session is None or run is None or run.returned is None:
        return
    st, rec = session.state, run.returned
    usage = rec.answer.usage if rec.answer is not None else None
    if usage is not None and usage.known:
        st.prefix_tokens = usage.input_tokens + usage.output_tokens
    elif st.model != rec.model:
        st.prefix_tokens = 0  # a new model whose usage is unknown: no cache to count on
    st.model, st.turns, st.last_at = rec.model, st.turns + 1, time.time()
    if tools is not None:
        st.tools = list(tools)
        st.used = {k: st.used.get(k, 0) for k in st.tools}
    try:
        await bounded(gw, store_of(gw).put(session.id, st, st.last_at))
    except (StateUnavailable, TimeoutError) as e:
        log.warning(json.dumps({"event": "session_unavailable", "op": "put", "error": str(e) or "timed out"}))
