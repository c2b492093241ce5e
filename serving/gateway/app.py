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
may only narrow that identity. An unexpected exception answers 500 with
`connection: close` (serving/gateway/errors.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from data.pool import Pool
from data.schema import Tool
from serving.backends import BackendError
from serving.client import RouterClient
from serving.gateway.answers import upstream_body
from serving.gateway.auth import Guard, Identity, KeyStore, forbidden, narrow, restrict_models
from serving.gateway.batcher import RoutingBatcher
from serving.gateway.cascade import MODEL_HEADER, CallRecord, Cascade, CascadeRequest, Run
from serving.gateway.config import ServingConfig
from serving.gateway.errors import CatchAll
from serving.gateway.metrics import GatewayMetrics
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
from serving.gateway.streams import json_as_sse, sse_passthrough
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


DRAIN_BYTES = 16 * 2**20  # an oversized body is read and dropped up to this, to answer 413 on a reusable connection
UNAUTHENTICATED = ("UNAUTHENTICATED gateway (auth.mode: none): no API key is asked for; anyone who can reach "
                   "{where} spends the pool's provider keys. For local use only.")


def create_app(cfg: ServingConfig, *, client: RouterClient, pool: Pool,
               tool_selector: ToolSelector | None = None, tools: GatewayTools | None = None,
               keys: KeyStore | None = None) -> FastAPI:
    """`tools`: a tool router over a catalog; when None it is built from `cfg.tools` (if configured).
    `keys`: the API keys; when None they are read as `cfg.auth` says (ValueError when none are configured)."""
    if tools is None and cfg.tools is not None:
        tools = GatewayTools.from_settings(cfg.tools)
    guard = Guard()
    metrics = GatewayMetrics()
    upstreams = Upstreams(pool, metrics, timeout_s=cfg.upstream.timeout_s,
                          max_connections=cfg.upstream.max_connections, breaker=cfg.upstream.breaker)
    unknown = [m for m in client.models if m not in pool.names]
    if unknown:
        raise ValueError(f"the router routes to {unknown}, which the pool file does not list; add them to the pool")
    cascade = Cascade(upstreams, pool, metrics, max_attempts=cfg.upstream.max_attempts,
                      hedge_after_s=cfg.upstream.hedge_after_s)
    forced = None if cfg.router.cascade is None else check_strategy(cfg.router.cascade.strategy(), pool.names,
                                                                    "router.cascade")
    keys = keys or KeyStore.from_settings(cfg.auth, pool.names)
    batcher = RoutingBatcher(client, metrics, max_batch_size=cfg.router.max_batch_size,
                             delay_s=cfg.router.batch_delay_ms / 1e3, max_queue=cfg.router.max_queue,
                             length_ratio=cfg.router.batch_length_ratio)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if keys.mode == "none":
            log.warning(json.dumps({"event": "auth", "mode": "none",
                                    "warning": UNAUTHENTICATED.format(where=f"{cfg.host}:{cfg.port}")}))
        yield
        await batcher.aclose()
        await upstreams.aclose()

    app = FastAPI(title="switchcraft gateway", lifespan=lifespan)
    app.state.metrics, app.state.client, app.state.tools, app.state.keys = metrics, client, tools, keys
    app.state.upstreams, app.state.guard, app.state.batcher = upstreams, guard, batcher
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

    def authenticate(request: Request) -> Identity:
        """The request's identity (its key's), admitted by the key's limits; GatewayError 401 / 429 otherwise.

        Refused before its body is read, so the answer closes the connection (the unread body would block it)."""
        ident = None
        try:
            ident = keys.authenticate(request.headers.get("authorization"))
            guard.admit(ident)
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
                    ident: Identity) -> tuple[Any, ToolRouted | None, list[Tool]]:
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
            routed = await batcher.route(messages, req_tools, constraints, threshold=threshold)
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
        return routed, tooled, req_tools

    def finish(endpoint: str, status: int, started: float, rid: str, ident: Identity | None, **fields) -> None:
        metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
        if ident is not None:
            metrics.key_requests.labels(key=ident.key_id, status=str(status)).inc()
        log.info(json.dumps({"event": endpoint, "request_id": rid, "status": status,
                             "ms": round((time.perf_counter() - started) * 1e3, 2),
                             "key": ident.key_id if ident else None, **fields}, default=str))

    def spend(ident: Identity, run: Run | None) -> None:
        """A request's cost on its key: every call's, abandoned ones at their estimate."""
        if run is None:
            return
        usd = run.cost_usd + run.abandoned_usd
        guard.spend(ident, usd)
        metrics.key_spend.labels(key=ident.key_id).inc(usd)

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
            ident = authenticate(request)
            body = await read_body(request)
            check_route_fields(body)
            routed, _, _ = await route(body, "constraints", body.get("threshold"), ident)
        except GatewayError as e:
            finish("route", e.status, started, rid, ident, error=e.message if e.status >= 500 else e.param)
            return error_response(e, rid)
        out = routed.to_dict()
        finish("route", 200, started, rid, ident, chosen=routed.decision.chosen, rule=routed.decision.rule,
               routing_ms=round(routed.latency_ms, 2), n_tokens=routed.n_tokens)
        return JSONResponse(out, headers={MODEL_HEADER: routed.decision.chosen, "x-request-id": rid})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        started, rid = time.perf_counter(), request_id(request)
        meta: dict[str, Any] = {}
        ident, run = None, None
        try:
            ident = authenticate(request)
            body = await read_body(request)
            mode, arg = model_mode(body.get("model"), pool.names)
            check_chat_fields(body)
            if upstreams.breakers.all_open():  # nothing can answer: say so before paying for routing
                raise upstreams.unavailable(pool.names)
            stream = body.get("stream", False)
            if mode == "route":
                routed, tooled, req_tools = await route(body, "switchcraft", arg, ident)
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
                costs = {arg: client.policy.costs[arg]} if arg in client.policy.costs else {}
                meta = {"routed": False, "chosen": arg}
            if tooled is not None:
                body = {**body, "tools": tooled.openai}
                meta["tool_routing"] = tooled.trace()  # once, here: not again inside `decision`
                meta.get("decision", {}).pop("tool_routing", None)
            payloads: dict[str, dict] = {}

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
            metrics.strategies.labels(kind=ran.kind, source=source).inc()
            if stream:
                result, run = await stream_single(ran, body_for, req_tools, costs)
            else:
                result, run = None, await cascade.run(strategy, CascadeRequest(body_for, req_tools, ranking, costs))
        except GatewayError as e:
            if getattr(e, "run", None) is not None:
                meta.update(e.run.trace())
                spend(ident, e.run)
            finish("chat", e.status, started, rid, ident, error=e.message if e.status >= 500 else e.param,
                   attempts=getattr(e, "attempts", None))
            return error_response(e, rid, meta or None)
        spend(ident, run)
        meta.update(run.trace())
        answer = run.returned.answer
        if tooled is not None and answer is not None:  # streamed answers are not read here
            meta["tool_routing"]["rejected_calls"] = tools.rejected_calls(tooled, answer.body)
        headers = {**run.headers(), "x-request-id": rid}
        finish("chat", 200, started, rid, ident, routed=meta["routed"], chosen=meta["chosen"], answered_by=run.returned.model,
               strategy=ran.name, verdict=run.verdict, cost_usd=run.cost_usd,
               attempts=[(c.model, c.outcome) for c in run.calls], stream=stream,
               n_messages=len(body["messages"]), n_tools=len(body.get("tools") or []),
               **({"catalog_version": meta["tool_routing"]["catalog_version"],
                   "n_exposed": len(meta["tool_routing"]["exposed"])} if "tool_routing" in meta else {}))
        if stream:
            events = (sse_passthrough(result, meta, req_tools) if answer is None
                      else json_as_sse(answer.body, run.returned.model, meta))
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
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

    @app.get("/readyz")
    async def readyz() -> Response:
        """Ready: the router answers and at least one upstream endpoint's breaker is not open."""
        router_ready = await anyio.to_thread.run_sync(client.ready)
        circuits = upstreams.breakers.states()
        ready = router_ready and any(state != "open" for state in circuits.values())
        body = {"ready": ready, "router": router_ready, "backend": client.backend.name,
                "router_version": client.version, "upstreams": circuits}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    return app


def request_id(request: Request) -> str:
    given = request.headers.get("x-request-id", "")
    return given if given.isascii() and given.isprintable() and 0 < len(given) <= 128 else uuid.uuid4().hex
