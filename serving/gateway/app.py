"""The gateway: route a tool-calling request to the cheapest model predicted to get it right, then forward it.

    switchcraft serve --config configs/serving.yaml
    app = create_app(cfg, client=RouterClient.from_dir(...), pool=load_pool(...))    # tests build it this way

Endpoints: POST /v1/route (the decision only), POST /v1/chat/completions
(OpenAI-compatible: `model: "router"` or `"router-<τ>"` routes, a pool model
name passes through; streaming passes through), GET /healthz, /readyz, /metrics.
Each model is asked the way it was labelled and its answer decoded into OpenAI
`tool_calls` (serving/gateway/answers.py); the decision's strategy runs
(serving/gateway/cascade.py: one model, or an agreement cascade); a stream takes
the single-model path. The answering model, the strategy and the cost of every
call are in the body (`model`, `switchcraft`) and the `x-switchcraft-*`
headers. Logs are one JSON object per request, without message text or keys.

Every request to /v1/* needs an API key (`Authorization: Bearer <key>`,
serving/gateway/auth.py) unless `auth.mode: none`; the key decides the caller
identity (which tools it may see) and its limits, and the body's caller field
may only narrow that identity. Limits are enforced in serving/gateway/budget.py
on counts kept in serving/gateway/state.py (SQLite or Redis): a request reserves
its worst-case cost before any upstream call and settles the real cost after,
streamed answers included. /metrics, /readyz details and GET /v1/admin/spend
need an admin key; /docs and /openapi.json are off unless `admin.docs`. An
unexpected exception answers 500 with `connection: close` (serving/gateway/errors.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import signal
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from data.pool import Pool
from data.schema import Tool
from serving.backends import BackendError
from serving.client import RouterClient
from serving.gateway.answers import upstream_body
from serving.gateway.auth import Identity, KeyStore, forbidden, narrow, restrict_models
from serving.gateway.batcher import RoutingBatcher
from serving.gateway.budget import Budgets, StreamCharge, charges_of, payload_size, spend_report, worst_case_usd
from serving.gateway.cascade import MODEL_HEADER, CallRecord, Cascade, CascadeRequest, Run
from serving.gateway.config import ServingConfig
from serving.gateway.errors import CatchAll
from serving.gateway.decision_log import DecisionLog
from serving.gateway.explore import Explorer
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.record import Observer, Served, notify
from serving.gateway.reload import RouterSlot, client_from
from serving.gateway.state import Charge, StateStore, StateUnavailable, open_state
from serving.gateway.requests import (
    GatewayError,
    check_chat_fields,
    check_route_fields,
    check_strategy,
    constraints_from,
    model_mode,
    parse_body,
    strategy_from,
    to_schema,
)
from serving.gateway.streams import json_as_sse, sse_passthrough, wants_usage
from serving.gateway.tools import GatewayTools, ToolRouted
from serving.gateway.upstream import Attempt, UpstreamResult, Upstreams
from serving.policy import Constraints, Decision, NoEligibleModel
from serving.tools.policy import Caller
from serving.strategy import Strategy

log = logging.getLogger("switchcraft.gateway")


class ToolSelector(Protocol):
    """The hook for tool routing (serving/tools): which tools this caller's request exposes.

    `caller` is the request's identity: its API key's, narrowed by the body."""

    def __call__(self, messages: list, tools: list, caller: Caller) -> list[str]: ...


DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
DRAIN_BYTES = 16 * 2**20  # an oversized body is read and dropped up to this, to answer 413 on a reusable connection
IN_MEMORY = ("state.path is null: limits and spend are kept in memory and forgotten when the gateway stops; "
             "set state.path (SQLite) or state.redis_url (several processes) to keep them")
UNAUTHENTICATED = ("UNAUTHENTICATED gateway (auth.mode: none): no API key is asked for; anyone who can reach "
                   "{where} spends the pool's provider keys. For local use only.")


def create_app(cfg: ServingConfig, *, client: RouterClient, pool: Pool,
               tool_selector: ToolSelector | None = None, tools: GatewayTools | None = None,
               keys: KeyStore | None = None, state: StateStore | None = None,
               observers: list[Observer] | None = None) -> FastAPI:
    """`tools`: a tool router over a catalog; when None it is built from `cfg.tools` (if configured).
    `keys`: the API keys; when None they are read as `cfg.auth` says (ValueError when none are configured).
    `state`: where limits and spend live; when None it is opened as `cfg.state` says (closed with the app).
    `observers`: more watchers of every served chat request (serving/gateway/record.py), after those `cfg` asks for."""
    if tools is None and cfg.tools is not None:
        tools = GatewayTools.from_settings(cfg.tools)
    metrics = GatewayMetrics()
    own_state, state = state is None, state or open_state(cfg.state)
    budgets = Budgets(state, metrics, retry_after_s=cfg.state.unavailable_retry_after_s)
    observers = list(observers or [])
    if cfg.otel.endpoint:  # one span per request, a child per upstream call (serving/gateway/tracing.py)
        from serving.gateway.tracing import Tracing

        observers.append(Tracing.from_settings(cfg.otel, breaker_state=lambda m: upstreams.breakers.of(m).current()))
    upstreams = Upstreams(pool, metrics, timeout_s=cfg.upstream.timeout_s,
                          max_connections=cfg.upstream.max_connections, breaker=cfg.upstream.breaker)
    cascade = Cascade(upstreams, pool, metrics, max_attempts=cfg.upstream.max_attempts,
                      hedge_after_s=cfg.upstream.hedge_after_s)
    forced = None if cfg.router.cascade is None else check_strategy(cfg.router.cascade.strategy(), pool.names,
                                                                    "router.cascade")
    keys = keys or KeyStore.from_settings(cfg.auth, pool.names)
    slot = RouterSlot(client, lambda c: RoutingBatcher(c, metrics, max_batch_size=cfg.router.max_batch_size,
                                                       delay_s=cfg.router.batch_delay_ms / 1e3,
                                                       max_queue=cfg.router.max_queue,
                                                       length_ratio=cfg.router.batch_length_ratio),
                      pool.names, metrics, load=lambda path: client_from(cfg.router, path), default_dir=cfg.router.dir)
    if cfg.log.path:  # every served request and every answer, for `switchcraft learn`
        observers.insert(0, DecisionLog.from_settings(cfg.log, metrics))
    if cfg.explore.rate > 0:  # after answering, the pool models the strategy did not call (own budget)
        decision_log = next((o for o in observers if isinstance(o, DecisionLog)), None)
        observers.insert(1 if decision_log else 0, Explorer(cfg.explore, pool, cascade, budgets, decision_log, metrics,
                                                            state_settings=cfg.state))

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if keys.mode == "none":
            log.warning(json.dumps({"event": "auth", "mode": "none",
                                    "warning": UNAUTHENTICATED.format(where=f"{cfg.host}:{cfg.port}")}))
        if not state.durable:
            log.warning(json.dumps({"event": "state", "store": "memory", "warning": IN_MEMORY}))
        hangup = _on_sighup(lambda: slot.reload())
        yield
        if hangup:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        for o in reversed(observers):  # flush what they hold (explorations in flight, then log records, spans)
            if hasattr(o, "aclose"):
                await o.aclose()
        await slot.aclose()
        await upstreams.aclose()
        if own_state:
            await state.aclose()

    docs = cfg.admin.docs  # off by default: the API's shape is no business of an anonymous caller
    app = FastAPI(title="switchcraft gateway", lifespan=lifespan, docs_url="/docs" if docs else None,
                  redoc_url="/redoc" if docs else None, openapi_url="/openapi.json" if docs else None)
    app.state.metrics, app.state.client, app.state.tools, app.state.keys = metrics, client, tools, keys
    app.state.upstreams, app.state.budgets, app.state.slot, app.state.store = upstreams, budgets, slot, state
    app.state.observers = observers
    app.add_middleware(CatchAll, metrics=metrics, log=log, body_timeout_s=cfg.body_timeout_s)

    async def read_body(request: Request) -> dict[str, Any]:
        """The body as a JSON object. Too large: a 413 once the rest is read and dropped (up to DRAIN_BYTES), so the
        connection stays usable; beyond that, a 413 with `connection: close` (unread bytes would block it)."""
        declared = request.headers.get("content-length")
        size = int(declared) if declared and declared.isdigit() else None
        if size is not None and size > DRAIN_BYTES:
            raise GatewayError(413, f"request body is {size:,} bytes; the limit is {cfg.max_body_bytes:,}",
                               param="body", headers={"connection": "close"})
        raw, seen = bytearray(), 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > DRAIN_BYTES:
                raise GatewayError(413, f"request body exceeds the limit of {cfg.max_body_bytes:,} bytes",
                                   param="body", headers={"connection": "close"})
            if seen <= cfg.max_body_bytes:
                raw += chunk
        if seen > cfg.max_body_bytes:
            raise GatewayError(413, f"request body is {seen:,} bytes; the limit is {cfg.max_body_bytes:,}", param="body")
        return parse_body(bytes(raw), cfg.max_body_bytes, cfg.max_json_depth)

    async def authenticate(request: Request) -> Identity:
        """The request's identity (its key's), admitted by the key's limits; GatewayError 401 / 429 / 503 otherwise.

        Refused before its body is read, so the answer closes the connection (the unread body would block it)."""
        ident = None
        try:
            ident = keys.authenticate(request.headers.get("authorization"))
            await budgets.admit(ident)
        except GatewayError as e:
            metrics.auth_rejections.labels(key=ident.key_id if ident else "", reason=getattr(e, "reason", "")).inc()
            e.headers = {**(e.headers or {}), "connection": "close"}
            raise
        return ident

    def who_asks(ident: Identity, asked: Any, field: str) -> Caller:
        """The key's identity narrowed by the body's caller field (403 if it would widen it)."""
        try:
            who = narrow(ident.caller, asked, f"{field}.caller")
            if tools is not None:
                tools.check_narrowing(who, ident.caller, f"{field}.caller")
        except GatewayError as e:
            if e.status == 403:
                metrics.auth_rejections.labels(key=ident.key_id, reason="caller").inc()
            raise
        return who

    def keyed_constraints(constraints: Constraints | None, ident: Identity, field: str) -> Constraints | None:
        """The request's constraints within the key's allowed models."""
        allowed = constraints.allowed_models if constraints else None
        try:
            keyed = restrict_models(allowed, ident, f"{field}.allowed_models")
        except GatewayError:
            metrics.auth_rejections.labels(key=ident.key_id, reason="model").inc()
            raise
        if keyed is allowed:
            return constraints
        return dataclasses.replace(constraints or Constraints(), allowed_models=keyed)

    async def route_tools(messages: list, who: Caller) -> ToolRouted:
        """The catalog's tools for this caller and request: they replace the request's own."""
        return await anyio.to_thread.run_sync(lambda: tools.route(messages, who))

    def pick_strategy(decision: Decision, requested: Strategy | None, field: str) -> tuple[str, str | None]:
        """(source, note): the request's strategy, else router.cascade, else the decision's own."""
        wanted, source = (requested, "request") if requested else (forced, "config") if forced else (None, "decision")
        if wanted is None:
            return source, None
        barred = {m: decision.excluded[m] for m in wanted.models if m in decision.excluded}
        if barred and source == "request":
            raise GatewayError(422, f"{field}.strategy calls models the constraints exclude: {barred}", param=field)
        if barred:  # the operator's cascade never overrides what a caller may use
            return "decision", f"router.cascade {wanted.name} not run: it calls excluded models {barred}"
        decision.strategy = wanted
        return source, None

    async def route(body: dict, constraints_field: str, threshold: float | None,
                    ident: Identity) -> tuple[Any, ToolRouted | None, list[Tool], list, frozenset[str] | None]:
        messages, req_tools = to_schema(body.get("messages"), body.get("tools"), cfg.max_messages, cfg.max_tools)
        constraints, caller = constraints_from(body.get(constraints_field), pool.names, constraints_field)
        requested = strategy_from((body.get(constraints_field) or {}).get("strategy"), pool.names,
                                  f"{constraints_field}.strategy")
        who = who_asks(ident, caller, constraints_field)
        constraints = keyed_constraints(constraints, ident, constraints_field)
        tooled = None
        if tools is not None:  # tools first: the model router packs and costs the reduced set
            tooled = await route_tools(messages, who)
            req_tools = tooled.tools
        t0 = time.perf_counter()
        try:
            routed = await slot.batcher.route(messages, req_tools, constraints, threshold=threshold)
        except NoEligibleModel as e:
            raise GatewayError(422, str(e), param=constraints_field) from None
        except BackendError as e:
            metrics.router_unavailable.inc()
            raise GatewayError(503, f"router backend unavailable: {e}", type="router_unavailable") from None
        metrics.routing_latency.observe(time.perf_counter() - t0)
        metrics.decisions.labels(model=routed.decision.chosen, rule=routed.decision.rule).inc()
        source, note = pick_strategy(routed.decision, requested, constraints_field)
        routed.extra["strategy_source"] = source
        if note:
            routed.extra["strategy_note"] = note
        if tooled is not None:
            routed.tools = tooled.decision.exposed_names
            routed.extra["tool_routing"] = tooled.trace()
        if tool_selector is not None:
            routed.tools = await anyio.to_thread.run_sync(lambda: tool_selector(messages, req_tools, who))
        allowed = constraints.allowed_models if constraints is not None else None
        return routed, tooled, req_tools, messages, allowed

    def finish(endpoint: str, status: int, started: float, rid: str, ident: Identity | None, **fields) -> None:
        metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
        if ident is not None:
            metrics.key_requests.labels(key=ident.key_id, status=str(status)).inc()
        log.info(json.dumps({"event": endpoint, "request_id": rid, "status": status,
                             "ms": round((time.perf_counter() - started) * 1e3, 2),
                             "key": ident.key_id if ident else None, **fields}, default=str))

    def reservation_for(strategy: Strategy, ranking: list[str], body: dict, body_for) -> float:
        """The request's worst case: every model its strategy may call, at the size of that model's payload."""
        return worst_case_usd(pool, strategy, ranking, body, lambda m: payload_size(body_for(m)),
                              max_attempts=cfg.upstream.max_attempts, chars_per_token=cfg.state.chars_per_token,
                              default_output_tokens=cfg.state.default_output_tokens)

    def charges(run: Run | None, payloads: dict[str, dict]) -> list[Charge]:
        """Every call's cost: real where the provider sent usage, else estimated; abandoned ones at their estimate."""
        if run is None:
            return []
        sizes = {m: payload_size(p) for m, p in payloads.items()}
        out = charges_of(run, pool, sizes, chars_per_token=cfg.state.chars_per_token,
                         default_output_tokens=cfg.state.default_output_tokens)
        for c in out:
            if c.kind == "estimated":
                metrics.estimated_usd.labels(model=c.model).inc(c.usd)
        return out

    def cost_headers(charged: list[Charge]) -> dict[str, str]:
        """What the request was charged, and how much of that is an estimate (no usage from the provider)."""
        return {"x-switchcraft-cost-usd": f"{sum(c.usd for c in charged):.8f}",
                "x-switchcraft-cost-estimated-usd": f"{sum(c.usd for c in charged if c.estimated):.8f}"}

    def error_response(e: GatewayError, rid: str, extra: dict | None = None) -> JSONResponse:
        body = e.body()
        if getattr(e, "attempts", None):
            body["error"]["attempts"] = e.attempts
        if extra:
            body["switchcraft"] = extra
        return JSONResponse(body, status_code=e.status, headers={**(e.headers or {}), "x-request-id": rid})

    @app.post("/v1/route")
    async def route_only(request: Request) -> Response:
        started, rid = time.perf_counter(), request_id(request)
        ident = None
        try:
            ident = await authenticate(request)
            body = await read_body(request)
            check_route_fields(body)
            routed, _, _, _, _ = await route(body, "constraints", body.get("threshold"), ident)
        except GatewayError as e:
            finish("route", e.status, started, rid, ident, error=e.message if e.status >= 500 else e.param)
            return error_response(e, rid)
        out = routed.to_dict()
        finish("route", 200, started, rid, ident, chosen=routed.decision.chosen, rule=routed.decision.rule,
               routing_ms=round(routed.latency_ms, 2), n_tokens=routed.n_tokens)
        return JSONResponse(out, headers={MODEL_HEADER: routed.decision.chosen, "x-request-id": rid})

    def observe(rid: str, ident: Identity | None, started: float, arrived: float, status: int, stream: bool,
                body: dict, messages: list, req_tools: list[Tool], meta: dict, run: Run | None,
                charged: list[Charge], error: str | None = None, allowed: frozenset[str] | None = None) -> None:
        """The decision log, exploration and traces see the request (none of them blocks it)."""
        if observers:
            notify(observers, Served(rid, ident.key_id if ident else None, arrived,
                                     (time.perf_counter() - started) * 1e3, status, slot.client.version, stream, body,
                                     messages, req_tools, meta, run, charged, error, allowed), log)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        started, rid, arrived = time.perf_counter(), request_id(request), time.time()
        meta: dict[str, Any] = {}
        ident, run, res = None, None, None
        payloads: dict[str, dict] = {}
        body, messages, req_tools, stream = {}, [], [], False
        allowed: frozenset[str] | None = frozenset()  # the models the caller's data may go to (None: any)
        try:
            ident = await authenticate(request)
            body = await read_body(request)
            mode, arg = model_mode(body.get("model"), pool.names)
            check_chat_fields(body)
            if upstreams.breakers.all_open():  # nothing can answer: say so before paying for routing
                raise upstreams.unavailable(pool.names)
            stream = body.get("stream", False)
            if mode == "route":
                routed, tooled, req_tools, messages, allowed = await route(body, "switchcraft", arg, ident)
                decision = routed.decision
                strategy, source = decision.strategy, routed.extra["strategy_source"]
                ranking, costs = decision.ranking, decision.costs
                meta = {"routed": True, "chosen": decision.chosen, "decision": routed.to_dict()}
            else:
                messages, req_tools = to_schema(body.get("messages"), body.get("tools"), cfg.max_messages, cfg.max_tools)
                _, caller = constraints_from(body.get("switchcraft"), pool.names)
                if (body.get("switchcraft") or {}).get("strategy") is not None:
                    raise GatewayError(400, f"switchcraft.strategy: applies to model 'router', not to the named model {arg!r}",
                                       param="switchcraft.strategy")
                who = who_asks(ident, caller, "switchcraft")
                if ident.limits.models is not None and arg not in ident.limits.models:
                    metrics.auth_rejections.labels(key=ident.key_id, reason="model").inc()
                    raise forbidden("model", f"{arg!r} is not allowed for this API key (it may use: "
                                    f"{', '.join(ident.limits.models)})", "model")
                tooled = None
                if tools is not None:  # a named model still sees only what the caller may see
                    tooled = await route_tools(messages, who)
                    req_tools = tooled.tools
                # The caller named this model: no silent substitution, no cascade. Its profiled cost prices an
                # abandoned call.
                strategy, source, ranking = Strategy.single(arg), "model", [arg]
                allowed = frozenset(ident.limits.models) if ident.limits.models is not None else None
                costs = {arg: slot.client.policy.costs[arg]} if arg in slot.client.policy.costs else {}
                meta = {"routed": False, "chosen": arg}
            if tooled is not None:
                body = {**body, "tools": tooled.openai}
                meta["tool_routing"] = tooled.trace()  # once, here: not again inside `decision`
                meta.get("decision", {}).pop("tool_routing", None)

            def body_for(model: str) -> dict:
                if model not in payloads:
                    payloads[model] = upstream_body(body, req_tools, pool.get(model))
                return payloads[model]

            if stream:  # streams take the single-model path: the decision's ranking (or a forced single)
                candidates = list(strategy.models) if strategy.kind == "single" else ranking
                ran = Strategy.single(candidates[0], tuple(candidates[1:]))
            else:
                ran = strategy
            meta["strategy"] = {**strategy.to_dict(), "source": source, "ran": ran.kind}
            # The worst case is held before any upstream call: concurrent requests see each other's holds.
            res = await budgets.reserve(ident, reservation_for(ran, ranking, body, body_for), rid)
            metrics.strategies.labels(kind=ran.kind, source=source).inc()
            if stream:
                result, run = await stream_single(ran, body_for, req_tools, costs)
            else:
                result, run = None, await cascade.run(strategy, CascadeRequest(body_for, req_tools, ranking, costs))
        except GatewayError as e:
            headers = {}
            if getattr(e, "run", None) is not None:
                meta.update(e.run.trace())
            if ident is not None and (res is not None or getattr(e, "run", None) is not None):
                charged = charges(getattr(e, "run", None), payloads)
                await budgets.settle(ident, res, charged, rid)
                headers = cost_headers(charged)
                observe(rid, ident, started, arrived, e.status, stream, body, messages, req_tools, meta,
                        getattr(e, "run", None), charged, e.message, allowed)
            finish("chat", e.status, started, rid, ident, error=e.message if e.status >= 500 else e.param,
                   attempts=getattr(e, "attempts", None))
            e.headers = {**(e.headers or {}), **headers}
            return error_response(e, rid, meta or None)
        except BaseException:
            if res is not None:  # our own failure after the hold: the calls it made are unknown, the hold is charged
                await budgets.settle(ident, res, [Charge("*", "abandoned", res.usd)], rid)
            raise
        meta.update(run.trace())
        answer = run.returned.answer
        if tooled is not None and answer is not None:  # streamed answers are not read here
            meta["tool_routing"]["rejected_calls"] = tools.rejected_calls(tooled, answer.body)
        passthrough = stream and answer is None
        charged = charges(run, payloads)
        if not passthrough:  # a streamed native answer is charged when its stream ends (its usage comes last)
            await budgets.settle(ident, res, charged, rid)
        headers = {**run.headers(), "x-request-id": rid}
        if not passthrough:
            headers.update(cost_headers(charged))
        else:  # the answer's own cost is known when the stream ends: a last chunk says it
            headers.pop("x-switchcraft-cost-usd", None)
        finish("chat", 200, started, rid, ident, routed=meta["routed"], chosen=meta["chosen"], answered_by=run.returned.model,
               strategy=ran.name, verdict=run.verdict, cost_usd=sum(c.usd for c in charged),
               attempts=[(c.model, c.outcome) for c in run.calls], stream=stream,
               n_messages=len(body["messages"]), n_tools=len(body.get("tools") or []),
               **({"catalog_version": meta["tool_routing"]["catalog_version"],
                   "n_exposed": len(meta["tool_routing"]["exposed"])} if "tool_routing" in meta else {}))
        observe(rid, ident, started, arrived, 200, stream, body, messages, req_tools, meta, run, charged,
                allowed=allowed)
        if passthrough:
            settle_stream = StreamCharge(budgets, pool, cfg.state, ident, res, charged, run.returned, rid,
                                         payloads.get(run.returned.model, {}), response=result.response)
            events = sse_passthrough(result, meta, req_tools, on_end=settle_stream,
                                     keep_usage=wants_usage(body))
            return StreamingResponse(events, media_type="text/event-stream", headers=headers,
                                     background=BackgroundTask(settle_stream.ensure))
        if stream:
            return StreamingResponse(json_as_sse(answer.body, run.returned.model, meta), media_type="text/event-stream",
                                     headers=headers)
        out = dict(answer.body)
        out["model"], out["switchcraft"] = run.returned.model, meta
        return JSONResponse(out, headers=headers)

    async def stream_single(ran: Strategy, body_for, req_tools: list[Tool],
                            costs: dict[str, float]) -> tuple[UpstreamResult, Run]:
        """Today's streaming path: the first model that answers; a prompt-style one answers whole, decoded."""
        run = Run(ran)
        try:
            result = await upstreams.call(body_for, list(ran.models), cfg.upstream.max_attempts, costs)
        except GatewayError as e:
            run.calls = [CallRecord(a["model"], "first" if i == 0 else "fallback", Attempt(**a))
                         for i, a in enumerate(getattr(e, "attempts", None) or [])]
            e.run = run  # type: ignore[attr-defined]
            raise
        run.calls = [CallRecord(a.model, "first" if i == 0 else "fallback", a) for i, a in enumerate(result.attempts)]
        run.returned = run.calls[-1]
        run.rule = "single" if len(run.calls) == 1 else "fallback"
        if result.body is not None:  # a JSON answer (prompt style, or an upstream that does not stream)
            cascade.read(run.returned, result.body, req_tools)
            if not run.returned.ok:
                run.returned = None
                e = GatewayError(502, f"upstream {result.model} sent a completion without a readable message",
                                 type="upstream_error")
                e.run = run  # type: ignore[attr-defined]
                raise e
        cascade.record(run)
        return result, run

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    def admin_of(request: Request) -> Identity:
        """The request's admin identity; 401 without a valid key, 403 for a key without the admin role."""
        ident = keys.authenticate(request.headers.get("authorization"))
        if not ident.admin:
            metrics.auth_rejections.labels(key=ident.key_id, reason="admin").inc()
            raise forbidden("admin", "this API key is not an admin key (role: admin in its entry)", "authorization")
        return ident

    def is_admin(request: Request) -> bool:
        try:
            admin_of(request)
        except GatewayError:
            return False
        return True

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        """Ready: the router answers and at least one upstream endpoint's breaker is not open. Details (backend,
        router version, upstream endpoints, the state store) only for an admin key."""
        client = slot.client
        router_ready = await anyio.to_thread.run_sync(client.ready)
        circuits = upstreams.breakers.states()
        ready = router_ready and any(s != "open" for s in circuits.values())
        body: dict[str, Any] = {"ready": ready, "router": router_ready}
        if is_admin(request):
            try:
                await state.ping()
                store_ok = True
            except StateUnavailable:
                store_ok = False
            body.update(backend=client.backend.name, router_version=client.version, upstreams=circuits,
                        state={"store": state.name, "durable": state.durable, "reachable": store_ok})
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        """Prometheus text; an admin key only (it names key ids, spend and upstream endpoints)."""
        try:
            admin_of(request)
        except GatewayError as e:
            return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.post("/v1/admin/reload")
    async def admin_reload(request: Request) -> Response:
        """Serve another router directory from now on (admin keys): `{"dir": …}`, default router.dir."""
        try:
            admin_of(request)
            raw = await request.body()
            body = json.loads(raw) if raw.strip() else {}
            where = body.get("dir") if isinstance(body, dict) else None
            if where is not None and not isinstance(where, str):
                raise GatewayError(400, "dir: must be a string (a router directory)", param="dir")
            out = await slot.reload(where)
        except GatewayError as e:
            return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
        except json.JSONDecodeError:
            return JSONResponse(GatewayError(400, "body: not JSON", param="body").body(), status_code=400)
        except ValueError as e:
            return JSONResponse(GatewayError(422, f"router not reloaded: {e}", param="dir").body(), status_code=422)
        return JSONResponse(out)

    @app.get("/v1/admin/spend")
    async def admin_spend(request: Request, key: str | None = None, day: str | None = None) -> Response:
        """The ledger (admin keys): every charge of `key` (an id) on `day` (YYYY-MM-DD, UTC), and their totals."""
        try:
            admin_of(request)
            if day is not None and not DAY.fullmatch(day):
                raise GatewayError(400, f"day: {day!r} is not a UTC date YYYY-MM-DD", param="day")
            rows = await state.ledger(key_id=key, day=day)
        except GatewayError as e:
            return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
        except StateUnavailable as e:
            metrics.state_errors.labels(op="ledger").inc()
            return JSONResponse(GatewayError(503, f"the ledger cannot be read now: {e}", type="state_unavailable").body(),
                                status_code=503, headers={"retry-after": "2"})
        return JSONResponse(spend_report(rows))

    return app


def _on_sighup(reload) -> bool:
    """SIGHUP reloads router.dir (only where the loop runs in the main thread, as under `switchcraft serve`)."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(reload()))
    except (ValueError, RuntimeError, NotImplementedError):
        return False
    return True


def request_id(request: Request) -> str:
    given = request.headers.get("x-request-id", "")
    return given if given.isascii() and given.isprintable() and 0 < len(given) <= 128 else uuid.uuid4().hex
