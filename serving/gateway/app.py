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
"""

from __future__ import annotations

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
from serving.gateway.cascade import MODEL_HEADER, CallRecord, Cascade, CascadeRequest, Run
from serving.gateway.config import ServingConfig
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.requests import (
    GatewayError,
    check_strategy,
    constraints_from,
    model_mode,
    parse_body,
    strategy_from,
    to_schema,
)
from serving.gateway.streams import json_as_sse, sse_passthrough
from serving.gateway.tools import GatewayTools, ToolRouted, caller_from
from serving.gateway.upstream import Attempt, UpstreamResult, Upstreams
from serving.policy import Decision, NoEligibleModel
from serving.strategy import Strategy

log = logging.getLogger("switchcraft.gateway")


class ToolSelector(Protocol):
    """The hook for tool routing (serving/tools): which tools this caller's request exposes."""

    def __call__(self, messages: list, tools: list, caller: str | None) -> list[str]: ...


def create_app(cfg: ServingConfig, *, client: RouterClient, pool: Pool,
               tool_selector: ToolSelector | None = None, tools: GatewayTools | None = None) -> FastAPI:
    """`tools`: a tool router over a catalog; when None it is built from `cfg.tools` (if configured)."""
    if tools is None and cfg.tools is not None:
        tools = GatewayTools.from_settings(cfg.tools)
    metrics = GatewayMetrics()
    upstreams = Upstreams(pool, metrics, timeout_s=cfg.upstream.timeout_s,
                          max_connections=cfg.upstream.max_connections)
    unknown = [m for m in client.models if m not in pool.names]
    if unknown:
        raise ValueError(f"the router routes to {unknown}, which the pool file does not list; add them to the pool")
    cascade = Cascade(upstreams, pool, metrics, max_attempts=cfg.upstream.max_attempts)
    forced = None if cfg.router.cascade is None else check_strategy(cfg.router.cascade.strategy(), pool.names,
                                                                    "router.cascade")

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await upstreams.aclose()

    app = FastAPI(title="switchcraft gateway", lifespan=lifespan)
    app.state.metrics, app.state.client, app.state.tools = metrics, client, tools

    async def read_body(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > cfg.max_body_bytes:
            raise GatewayError(413, f"request body is {int(declared):,} bytes; the limit is {cfg.max_body_bytes:,}")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > cfg.max_body_bytes:
                raise GatewayError(413, f"request body exceeds the limit of {cfg.max_body_bytes:,} bytes")
        return parse_body(bytes(raw), cfg.max_body_bytes)

    async def route_tools(messages: list, caller: Any, constraints_field: str) -> ToolRouted:
        """The catalog's tools for this caller and request: they replace the request's own."""
        who = caller_from(caller, f"{constraints_field}.caller")
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

    async def route(body: dict, constraints_field: str, threshold: float | None) -> tuple[Any, ToolRouted | None, list[Tool]]:
        messages, req_tools = to_schema(body.get("messages"), body.get("tools"), cfg.max_messages, cfg.max_tools)
        constraints, caller = constraints_from(body.get(constraints_field), pool.names)
        requested = strategy_from((body.get(constraints_field) or {}).get("strategy"), pool.names,
                                  f"{constraints_field}.strategy")
        tooled = None
        if tools is not None:  # tools first: the model router packs and costs the reduced set
            tooled = await route_tools(messages, caller, constraints_field)
            req_tools = tooled.tools
        t0 = time.perf_counter()
        try:
            routed = await anyio.to_thread.run_sync(lambda: client.route(messages, req_tools, constraints, threshold=threshold))
        except NoEligibleModel as e:
            raise GatewayError(422, str(e), param=constraints_field) from None
        except BackendError as e:
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
            routed.tools = await anyio.to_thread.run_sync(lambda: tool_selector(messages, req_tools, caller))
        return routed, tooled, req_tools

    def finish(endpoint: str, status: int, started: float, rid: str, **fields) -> None:
        metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
        log.info(json.dumps({"event": endpoint, "request_id": rid, "status": status,
                             "ms": round((time.perf_counter() - started) * 1e3, 2), **fields}, default=str))

    def error_response(e: GatewayError, rid: str, extra: dict | None = None) -> JSONResponse:
        body = e.body()
        if getattr(e, "attempts", None):
            body["error"]["attempts"] = e.attempts
        if extra:
            body["switchcraft"] = extra
        return JSONResponse(body, status_code=e.status, headers={"x-request-id": rid})

    @app.post("/v1/route")
    async def route_only(request: Request) -> Response:
        started, rid = time.perf_counter(), request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            body = await read_body(request)
            threshold = body.get("threshold")
            if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int | float)
                                          or not 0 <= threshold <= 1):
                raise GatewayError(400, "threshold: must be a number within [0, 1]", param="threshold")
            routed, _, _ = await route(body, "constraints", threshold)
        except GatewayError as e:
            finish("route", e.status, started, rid, error=e.message if e.status >= 500 else e.param)
            return error_response(e, rid)
        out = routed.to_dict()
        finish("route", 200, started, rid, chosen=routed.decision.chosen, rule=routed.decision.rule,
               routing_ms=round(routed.latency_ms, 2), n_tokens=routed.n_tokens)
        return JSONResponse(out, headers={MODEL_HEADER: routed.decision.chosen, "x-request-id": rid})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        started, rid = time.perf_counter(), request.headers.get("x-request-id") or uuid.uuid4().hex
        meta: dict[str, Any] = {}
        try:
            body = await read_body(request)
            mode, arg = model_mode(body.get("model"), pool.names)
            stream = body.get("stream", False)
            if not isinstance(stream, bool):
                raise GatewayError(400, "stream: must be true or false", param="stream")
            if mode == "route":
                routed, tooled, req_tools = await route(body, "switchcraft", arg)
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
                tooled = None
                if tools is not None:  # a named model still sees only what the caller may see
                    tooled = await route_tools(messages, caller, "switchcraft")
                    req_tools = tooled.tools
                # The caller named this model: no silent substitution, no cascade.
                strategy, source, ranking, costs = Strategy.single(arg), "model", [arg], {}
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
                result, run = await stream_single(ran, body_for, req_tools)
            else:
                result, run = None, await cascade.run(strategy, CascadeRequest(body_for, req_tools, ranking, costs))
        except GatewayError as e:
            if getattr(e, "run", None) is not None:
                meta.update(e.run.trace())
            finish("chat", e.status, started, rid, error=e.message if e.status >= 500 else e.param,
                   attempts=getattr(e, "attempts", None))
            return error_response(e, rid, meta or None)
        meta.update(run.trace())
        answer = run.returned.answer
        if tooled is not None and answer is not None:  # streamed answers are not read here
            meta["tool_routing"]["rejected_calls"] = tools.rejected_calls(tooled, answer.body)
        headers = {**run.headers(), "x-request-id": rid}
        finish("chat", 200, started, rid, routed=meta["routed"], chosen=meta["chosen"], answered_by=run.returned.model,
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

    async def stream_single(ran: Strategy, body_for, req_tools: list[Tool]) -> tuple[UpstreamResult, Run]:
        """Today's streaming path: the first model that answers; a prompt-style one answers whole, decoded."""
        run = Run(ran)
        try:
            result = await upstreams.call(body_for, list(ran.models), cfg.upstream.max_attempts)
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
        ready = await anyio.to_thread.run_sync(client.ready)
        body = {"ready": ready, "backend": client.backend.name, "router_version": client.version}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The router never crashes on a request: log the type (not the body) and answer 500.
        log.error(json.dumps({"event": "unhandled", "path": request.url.path, "error": type(exc).__name__}))
        return JSONResponse(GatewayError(500, f"internal error ({type(exc).__name__})", type="server_error").body(),
                            status_code=500)

    return app
