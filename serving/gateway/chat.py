"""POST /v1/chat/completions, top to bottom: admit → plan → reserve → run → settle → respond.

    response = await chat(gw, request)        # gw: serving/gateway/parts.py Gateway, built by create_app

`model: "router"` (or `"router-<τ>"`) is planned by the router: its decision's
strategy, a strategy the request gives, or router.cascade. A pool model's name
is planned as that model alone: no silent substitution, no cascade. From the
plan on both are one path. The strategy's first step is held before any upstream
call, and each further call extends the hold before it is sent (serving/core/budget.py
`Hold`); the strategy runs (serving/gateway/cascade.py),
or, for a stream, the first model of the ranking that answers, passed through
(serving/gateway/streams.py); the real cost is settled after, a passed-through
stream's when it ends. Every request with a hold or an upstream call is seen by
the observers (serving/core/record.py), failed ones too.

POST /v1/messages and /v1/responses take this same path (`serve` with their
`Api`, serving/gateway/apis/): their body is translated into a chat body
first, their answer out of the chat answer last, errors in their own shape.
Planned on one model, they run as one call (serving/gateway/passthrough.py):
their own body passed through to a model whose provider speaks their API, or
their stream rendered as it comes; a cascade runs whole (its answer as events).

A request of an agent session (serving/gateway/sessions.py) keeps the model of
the session's previous turn while its cached prefix makes that cheaper, and the
tool router's tools for it grow in a stable order, up to `tools.max_tools`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from data.pool import Pool
from serving.gateway.admit import authenticate, read_body, request_id
from serving.gateway.answers import upstream_body
from serving.gateway.apis import Api, Inbound, openai_chat
from serving.core.auth import Identity
from serving.core.budget import (Hold, StreamCharge, call_worst_case_usd, charges_of, first_step, first_step_usd,
                                 payload_size, tokens_in)
from serving.gateway.cascade import CallRecord, CascadeRequest, Run
from serving.core.errors import GatewayError, error_response
from serving.gateway.fairshare import CALLER
from serving.gateway.overhead import CLOCK, Clock
from serving.gateway.parts import Gateway
from serving.gateway import passthrough as own_api
from serving.core.record import Served, notify, notify_ended
from serving.gateway.requests import check_chat_fields, model_mode
from serving.gateway.route import Asked, decide, read_asked
from serving.gateway.sessions import Session, grow_tools, keep_or_switch, open_session, remember
from serving.core.state import Charge, Reservation
from serving.gateway.tool_choice import AUTO, ToolChoice
from serving.gateway.streams import json_as_sse, sse_passthrough, wants_usage
from serving.gateway.upstream import GATE, Attempt, UpstreamResult
from training.policy import Strategy
from training.policy.kinds import kind_of

log = logging.getLogger("switchcraft.gateway")
FIELD = "switchcraft"  # the body's own object: allowed_models, max_cost_usd, min_probability, caller, strategy


@dataclass
class Plan:
    """What a chat request runs, and the `switchcraft` trace it answers with."""

    body: dict[str, Any]  # what is forwarded: the caller's body, its tools replaced by tool routing
    asked: Asked
    strategy: Strategy  # the plan's strategy (`ran` is what runs: a stream takes the single-model path)
    ran: Strategy
    source: str  # request | config | decision | session | model
    ranking: list[str]
    costs: dict[str, float]  # expected cost per model: which answer is cheaper, what an abandoned call costs
    meta: dict[str, Any]
    pool: Pool = field(repr=False)
    payloads: dict[str, dict] = field(default_factory=dict)  # per model, built once
    native: Callable[[str], dict | None] | None = None  # the caller's own body for a model that takes it as it is

    def body_for(self, model: str) -> dict:
        if model not in self.payloads:
            native = self.native(model) if self.native is not None else None
            self.payloads[model] = native if native is not None else upstream_body(self.body, self.asked.tools,
                                                                                   self.pool.get(model))
        return self.payloads[model]


@dataclass
class Outcome:
    """What running a plan came to: the calls made (`run`), and the error when no answer came."""

    run: Run | None
    error: GatewayError | None = None
    upstream: UpstreamResult | None = None  # a stream's upstream answer: passed through when it is not JSON


@dataclass
class Pending:
    """One chat request so far: what its error answer, its settlement and its observers need."""

    rid: str
    started: float  # time.perf_counter()
    arrived: float  # time.time()
    ident: Identity | None = None
    stream: bool = False
    plan: Plan | None = None
    res: Reservation | None = None  # the hold on the key's day
    hold: Hold | None = None  # the hold's stages: what the run's further calls extend it by
    api: Api = field(default_factory=Api)  # the API the caller speaks (Chat Completions unless translated)
    session: Session | None = None  # the agent session the request is a turn of
    clock: Clock = field(default_factory=Clock)  # its upstream waits: what the gateway itself added (overhead.py)


CHAT = openai_chat.API


async def chat(gw: Gateway, request: Request) -> Response:
    """POST /v1/chat/completions."""
    return await serve(gw, request, CHAT)


def handler(gw: Gateway, api: Api):
    """The endpoint of `api` on these parts (registered by create_app)."""

    async def endpoint(request: Request) -> Response:
        return await serve(gw, request, api)

    return endpoint


async def serve(gw: Gateway, request: Request, api: Api) -> Response:
    """Every step below, in order, for a request in `api`; an error at any step answers with what it knows, in
    `api`'s error shape. Chat passes a stream through; the others run as one call on one model (passthrough.py)."""
    clock = CLOCK.get() or Clock()  # set by the Overhead middleware when the request came through the app
    at = Pending(request_id(request), clock.started, time.time(), api=api, clock=clock)
    inbound: Inbound | None = None
    try:
        key = request.headers.get(api.key_header) if api.key_header else None
        at.ident = await authenticate(gw, request, f"Bearer {key}" if key else None)
        CALLER.set(at.ident.key_id)  # this request's task: its upstream calls count against its key's share
        sent = await read_body(gw, request)
        inbound = api.inbound(sent)
        body = inbound.body
        mode, arg = model_mode(body.get("model"), gw.pool.names)
        check_chat_fields(body)
        if gw.upstreams.breakers.all_open():  # nothing can answer: say so before paying for routing
            raise gw.upstreams.unavailable(gw.pool.names)
        at.stream = inbound.stream
        # A stream passed through unread could carry a call to a tool the caller was not shown: with tool routing
        # (unless tools.rejected_calls is pass) the answer is read whole, then sent as a stream.
        passthrough = at.stream and api.reply is None and (gw.tools is None or gw.tools.rejected == "pass") \
            and not ToolChoice.of(body).constrained  # a tool_choice is enforced on the whole answer
        if at.stream and not passthrough:
            body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        named, threshold = (None, arg) if mode == "route" else (arg, None)
        at.session = await open_session(gw, request.headers, body, api, at.ident.key_id, sent)
        at.plan = await plan(gw, body, named, threshold, at.ident, passthrough, at.session)
        one_call = False
        if api.reply is not None:
            at.plan.meta["api"] = api.endpoint
            one_call = own_api.choose(gw, at, sent, request.headers)
        at.res = await reserve(gw, at)
        gated = GATE.set(at.hold)
        try:
            out = await run(gw, at.plan, passthrough or one_call)
        finally:
            GATE.reset(gated)
            at.res = at.hold.res
    except GatewayError as e:
        return await failed(gw, at, inbound.caller_error(e) if inbound is not None else e, None)
    except BaseException:
        if at.res is not None:  # our own failure after the hold: the calls it made are unknown, the hold is charged
            await gw.budgets.settle(at.ident, at.res, [Charge("*", "abandoned", at.res.usd)], at.rid)
        raise
    if out.error is not None:
        return await failed(gw, at, out.error, out.run)
    if at.hold.refused is not None:  # a further call was refused: the answer in hand went back
        at.plan.meta["refused"] = refusal(at.hold.refused, at.hold)
    charged, headers = await settle(gw, at, out)
    tooled = at.plan.asked.tooled
    await remember(gw, at.session, out.run, tooled.decision.tool_keys if tooled is not None else None)
    return respond(gw, at, out, charged, headers, sent)


async def plan(gw: Gateway, body: dict, named: str | None, threshold: float | None, ident: Identity,
               stream: bool, session: Session | None = None) -> Plan:
    """Routed (`named` None): the router's decision and its strategy (in a session, perhaps the previous turn's
    model). Named: that model alone; its profiled cost prices an abandoned call."""
    asked = grow_tools(gw, await read_asked(gw, body, FIELD, ident, named=named), session)
    if named is None:
        routed = await decide(gw, asked, threshold, FIELD)
        d = routed.decision
        strategy, source, ranking, costs = d.strategy, routed.extra["strategy_source"], d.ranking, d.costs
        if source == "decision" and kind_of(strategy).one_at_a_time and (
                kept := keep_or_switch(gw.pool, session, d, time.time(), tokens_in(
                    payload_size(body), gw.cfg.state.chars_per_token))) is not None:
            strategy, source = kept, "session"
        meta: dict[str, Any] = {"routed": True, "chosen": d.chosen, "decision": routed.to_dict()}
    else:
        profiled = gw.slot.client.policy.costs
        strategy, source, ranking = Strategy.single(named), "model", [named]
        costs = {named: profiled[named]} if named in profiled else {}
        meta = {"routed": False, "chosen": named}
    if asked.tooled is not None:
        body = {**body, "tools": asked.tooled.openai}
        meta["tool_routing"] = asked.tooled.trace()  # once, here: not again inside `decision`
        meta.get("decision", {}).pop("tool_routing", None)
    ran = strategy
    if stream:  # streams take the single-model path: the strategy's models if it asks them in turn, else the ranking
        candidates = list(strategy.models) if kind_of(strategy).one_at_a_time else ranking
        ran = Strategy.single(candidates[0], tuple(candidates[1:]))
    meta["strategy"] = {**strategy.to_dict(), "source": source, "ran": ran.kind}
    if session is not None:
        meta["session"] = session.to_dict()
    return Plan(body, asked, strategy, ran, source, ranking, costs, meta, gw.pool)


async def reserve(gw: Gateway, at: Pending) -> Reservation | None:
    """The strategy's first step (its kind's `first_step`: the first model, or an agreement's two, at the size of
    their payloads and the output cap sent) held before any upstream call: concurrent requests see each other's
    holds. 429 when the key's day has no room for it. `at.hold` extends it for each further call."""
    p, st = at.plan, gw.cfg.state

    def price(model: str) -> float:
        return call_worst_case_usd(gw.pool, model, p.body, payload_size(p.body_for(model)),
                                   chars_per_token=st.chars_per_token, default_output_tokens=st.default_output_tokens)

    first = first_step_usd(gw.pool, p.ran, p.body, lambda m: payload_size(p.body_for(m)),
                           chars_per_token=st.chars_per_token, default_output_tokens=st.default_output_tokens)
    res = await gw.budgets.reserve(at.ident, first, at.rid)
    at.hold = Hold(gw.budgets, at.ident, res, first_step(p.ran), price)
    gw.metrics.strategies.labels(kind=p.ran.kind, source=p.source).inc()
    return res


async def run(gw: Gateway, p: Plan, one_call: bool) -> Outcome:
    """The strategy's run over the upstreams; one call (a stream, a passed-through body): the first model of `ran`
    that answers."""
    if one_call:
        return await stream_single(gw, p)
    run_ = await gw.cascade.run(p.strategy, CascadeRequest(p.body_for, p.asked.tools, p.ranking, p.costs,
                                                           choice=ToolChoice.of(p.body)))
    return Outcome(run_, run_.error)


async def stream_single(gw: Gateway, p: Plan) -> Outcome:
    """The first model that answers, its stream passed through; a prompt-style one answers whole, decoded and held
    to the caller's tool_choice (a passed-through body's provider holds its answer to it)."""
    run_ = Run(p.ran)
    try:
        result = await gw.upstreams.call(p.body_for, list(p.ran.models), gw.cfg.upstream.max_attempts, p.costs)
    except GatewayError as e:
        run_.calls = [CallRecord(a["model"], "first" if i == 0 else "fallback", Attempt(**a))
                      for i, a in enumerate(e.attempts or [])]
        return Outcome(run_, e)
    run_.calls = [CallRecord(a.model, "first" if i == 0 else "fallback", a) for i, a in enumerate(result.attempts)]
    run_.returned = run_.calls[-1]
    run_.rule = "single" if len(run_.calls) == 1 else "fallback"
    if result.body is not None:  # a JSON answer (prompt style, or an upstream that does not stream)
        gw.cascade.read(run_.returned, result.body, p.asked.tools,
                        AUTO if "native_body" in result.extra else ToolChoice.of(p.body))
        if not run_.returned.ok:
            unmet, run_.returned = run_.returned.answer is not None, None  # read, without the call tool_choice asks
            return Outcome(run_, gw.cascade.no_answer(run_) if unmet else GatewayError(
                502, f"upstream {result.model} sent a completion without a readable message", type="upstream_error"))
    gw.cascade.record(run_)
    return Outcome(run_, upstream=result)


async def settle(gw: Gateway, at: Pending, out: Outcome) -> tuple[list[Charge], dict[str, str]]:
    """The calls' real cost on the key's day (a passed-through stream's when it ends: its usage comes last), the
    trace in `meta`, and the answer's headers."""
    p, run_ = at.plan, out.run
    p.meta.update(run_.trace())
    answer = run_.returned.answer
    if p.asked.tooled is not None and answer is not None:  # streamed answers are not read here
        p.meta["tool_routing"]["rejected_calls"] = gw.tools.rejected_calls(p.asked.tooled, answer.body)
        if p.meta["tool_routing"]["rejected_calls"]:  # tools.rejected_calls: dropped, refused, or passed on
            answer.body = gw.tools.withhold(p.asked.tooled, answer.body)
    charged = charges(gw, run_, p.payloads)
    headers = {**run_.headers(), "x-request-id": at.rid}
    if at.stream and answer is None:  # passed through: its own cost is known when the stream ends, and a last chunk says it
        headers.pop("x-switchcraft-cost-usd", None)
    else:
        await gw.budgets.settle(at.ident, at.res, charged, at.rid)
        headers.update(cost_headers(charged))
    return charged, headers


def respond(gw: Gateway, at: Pending, out: Outcome, charged: list[Charge], headers: dict[str, str],
            caller_body: dict | None = None) -> Response:
    """The request's log line and observers, then the answer: JSON, JSON as SSE, the upstream's own stream, or
    (a translated API) the answer in the caller's API. `caller_body`: the body as the caller sent it."""
    p, run_, meta = at.plan, out.run, at.plan.meta
    tooling = meta.get("tool_routing")
    gw.finish(at.api.endpoint, 200, at.started, at.rid, at.ident, routed=meta["routed"], chosen=meta["chosen"],
              answered_by=run_.returned.model, strategy=p.ran.name, verdict=run_.verdict,
              cost_usd=sum(c.usd for c in charged), attempts=[(c.model, c.outcome) for c in run_.calls],
              stream=at.stream, n_messages=len(p.body["messages"]), n_tools=len(p.body.get("tools") or []),
              **({"catalog_version": tooling["catalog_version"], "n_exposed": len(tooling["exposed"])}
                 if tooling is not None else {}))
    answer = run_.returned.answer
    served = observe(gw, at, 200, run_, charged, open_stream=at.stream and answer is None and at.api.reply is None)
    if at.api.reply is not None:
        return own_api.answer(gw, at, out, charged, headers, caller_body or {})
    if at.stream and answer is None:
        settle_stream = StreamCharge(gw.budgets, gw.pool, gw.cfg.state, at.ident, at.res, charged, run_.returned,
                                     at.rid, p.payloads.get(run_.returned.model, {}), response=out.upstream.response)
        on_end, ensure = stream_end(gw, at.clock, served, settle_stream)
        events = sse_passthrough(out.upstream, meta, p.asked.tools, on_end=on_end,
                                 keep_usage=wants_usage(p.body), clock=at.clock)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers,
                                 background=BackgroundTask(ensure))
    if at.stream:
        return StreamingResponse(json_as_sse(answer.body, run_.returned.model, meta), media_type="text/event-stream",
                                 headers=headers)
    return JSONResponse({**answer.body, "model": run_.returned.model, "switchcraft": meta}, headers=headers)


async def failed(gw: Gateway, at: Pending, e: GatewayError, run_: Run | None) -> JSONResponse:
    """The error's answer, with the trace so far; a request that held money or called upstreams is settled (with
    cost headers) and observed as well."""
    meta = at.plan.meta if at.plan is not None else {}
    headers: dict[str, str] = {}
    if run_ is not None:
        meta.update(run_.trace())
    refused = refusal(e, at.hold)
    if refused is not None:
        meta["refused"] = refused
    if at.ident is not None and (at.res is not None or run_ is not None):
        charged = charges(gw, run_, at.plan.payloads)
        await gw.budgets.settle(at.ident, at.res, charged, at.rid)
        headers = cost_headers(charged)
        observe(gw, at, e.status, run_, charged, e.message)
    elif refused is not None:  # refused before any hold: the decision log still shows it
        observe(gw, at, e.status, None, [], e.message, key_id=getattr(e, "key_id", None), meta=meta)
    gw.finish(at.api.endpoint, e.status, at.started, at.rid, at.ident,
              error=e.message if e.status >= 500 else e.param, attempts=e.attempts)
    e.headers = {**(e.headers or {}), **headers}
    return error_response(e, at.rid, meta or None, at.api.error_body)


def charges(gw: Gateway, run_: Run | None, payloads: dict[str, dict]) -> list[Charge]:
    """Every call's cost: real where the provider sent usage, else estimated; abandoned ones at their estimate."""
    if run_ is None:
        return []
    sizes = {m: payload_size(p) for m, p in payloads.items()}
    out = charges_of(run_, gw.pool, sizes, chars_per_token=gw.cfg.state.chars_per_token,
                     default_output_tokens=gw.cfg.state.default_output_tokens)
    for c in out:
        if c.kind == "estimated":
            gw.metrics.estimated_usd.labels(model=c.model).inc(c.usd)
    return out


def cost_headers(charged: list[Charge]) -> dict[str, str]:
    """What the request was charged, and how much of that is an estimate (no usage from the provider)."""
    return {"x-switchcraft-cost-usd": f"{sum(c.usd for c in charged):.8f}",
            "x-switchcraft-cost-estimated-usd": f"{sum(c.usd for c in charged if c.estimated):.8f}"}


def observe(gw: Gateway, at: Pending, status: int, run_: Run | None, charged: list[Charge],
            error: str | None = None, *, key_id: str | None = None, meta: dict | None = None,
            open_stream: bool = False) -> Served | None:
    """The decision log, exploration and traces see the request (none of them blocks it); a request refused
    before it was planned is seen without a body. `open_stream`: a passed-through stream, seen again when it
    ends (`stream_end`)."""
    if not gw.observers:
        return None
    p, key_id = at.plan, at.ident.key_id if at.ident else key_id
    now = time.perf_counter()
    took, version = (now - at.started) * 1e3, gw.slot.client.version
    if p is None:
        served = Served(at.rid, key_id, at.arrived, took, status, version, at.stream, meta=meta or {}, error=error)
    else:
        served = Served(at.rid, key_id, at.arrived, took, status, version, at.stream, p.body, p.asked.messages,
                        p.asked.tools, p.meta, run_, charged, error, allowed_models=p.asked.allowed)
    served.overhead_ms, served.open_stream = at.clock.overhead_ms(now), open_stream
    notify(gw.observers, served, log)
    return served


def stream_end(gw: Gateway, clock: Clock, served: Served | None, charge: StreamCharge):
    """(on_end, ensure) of a passed-through stream: its charge (serving/core/budget.py StreamCharge), then the
    observers waiting for its end see it with the whole stream's overhead."""

    def ended() -> None:
        if served is not None and served.open_stream:
            served.overhead_ms, served.open_stream = clock.overhead_ms(), False
            notify_ended(gw.observers, served, log)

    async def on_end(usage: dict | None, output_bytes: int, *, abandoned: bool = False) -> list[Charge]:
        charged = await charge(usage, output_bytes, abandoned=abandoned)
        ended()
        return charged

    async def ensure() -> None:
        await charge.ensure()
        ended()

    return on_end, ensure


# Refusals of the key's limits and money (serving/core/budget.py), and the store's outage for keys with limits.
REFUSALS = ("budget", "budget_held", "rate_limit")


def refusal(e: GatewayError, hold: Hold | None) -> dict | None:
    """What the decision log's `reason` and the trace say of a refusal of the key's limits: from admission, the
    first hold, or an extension of it refused before a further call (`extension`)."""
    if e.status not in (429, 503) or (e.reason not in REFUSALS and e.type != "state_unavailable"):
        return None
    return {"reason": e.reason or e.type, "status": e.status, "extension": hold is not None and e is hold.refused,
            "retry_after_s": int(e.headers["retry-after"]) if e.headers and "retry-after" in e.headers else None}
