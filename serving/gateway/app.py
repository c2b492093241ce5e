"""The gateway: route a tool-calling request to the cheapest model predicted to get it right, then forward it.

    switchcraft serve --config configs/serving.yaml
    app = create_app(cfg, client=RouterClient.from_dir(...), pool=load_pool(...))    # tests build it this way

Endpoints: POST /v1/route (the decision only), POST /v1/chat/completions
(OpenAI-compatible: `model: "router"` or `"router-<τ>"` routes, a pool model
name passes through; streaming passes through), GET /healthz, /readyz, /metrics.
The chosen model is in the body (`model`, `switchcraft`) and in the
`x-switchcraft-model` header, streaming included. Logs are one JSON object per
request, without message text or keys.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from data.pool import Pool
from serving.backends import BackendError
from serving.client import RouterClient
from serving.gateway.config import ServingConfig
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.requests import (
    GatewayError,
    constraints_from,
    model_mode,
    parse_body,
    to_schema,
)
from serving.gateway.tools import GatewayTools, ToolRouted, caller_from
from serving.gateway.upstream import UpstreamResult, Upstreams
from serving.policy import NoEligibleModel

log = logging.getLogger("switchcraft.gateway")
MODEL_HEADER = "x-switchcraft-model"


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

    async def route(body: dict, constraints_field: str, threshold: float | None) -> tuple[Any, ToolRouted | None]:
        messages, req_tools = to_schema(body.get("messages"), body.get("tools"), cfg.max_messages, cfg.max_tools)
        constraints, caller = constraints_from(body.get(constraints_field), pool.names)
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
        if tooled is not None:
            routed.tools = tooled.decision.exposed_names
            routed.extra["tool_routing"] = tooled.trace()
        if tool_selector is not None:
            routed.tools = await anyio.to_thread.run_sync(lambda: tool_selector(messages, req_tools, caller))
        return routed, tooled

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
            routed, _ = await route(body, "constraints", threshold)
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
                routed, tooled = await route(body, "switchcraft", arg)
                candidates = routed.decision.ranking
                meta = {"routed": True, "chosen": routed.decision.chosen, "decision": routed.to_dict()}
            else:
                messages, _ = to_schema(body.get("messages"), body.get("tools"), cfg.max_messages, cfg.max_tools)
                tooled = None
                if tools is not None:  # a named model still sees only what the caller may see
                    _, caller = constraints_from(body.get("switchcraft"), pool.names)
                    tooled = await route_tools(messages, caller, "switchcraft")
                candidates = [arg]  # the caller named this model: no silent substitution
                meta = {"routed": False, "chosen": arg}
            if tooled is not None:
                body = {**body, "tools": tooled.openai}
                meta["tool_routing"] = tooled.trace()  # once, here: not again inside `decision`
                meta.get("decision", {}).pop("tool_routing", None)
            result = await upstreams.call(body, candidates, cfg.upstream.max_attempts, stream=stream)
        except GatewayError as e:
            finish("chat", e.status, started, rid, error=e.message if e.status >= 500 else e.param,
                   attempts=getattr(e, "attempts", None))
            return error_response(e, rid, meta or None)
        meta.update(answered_by=result.model, fallback=result.model != meta["chosen"],
                    attempts=result.attempts_json())
        if tooled is not None and result.body is not None:  # streamed answers are not read here
            meta["tool_routing"]["rejected_calls"] = tools.rejected_calls(tooled, result.body)
        headers = {MODEL_HEADER: result.model, "x-request-id": rid}
        finish("chat", 200, started, rid, routed=meta["routed"], chosen=meta["chosen"], answered_by=result.model,
               attempts=[(a.model, a.outcome) for a in result.attempts], stream=stream,
               n_messages=len(body["messages"]), n_tools=len(body.get("tools") or []),
               **({"catalog_version": meta["tool_routing"]["catalog_version"],
                   "n_exposed": len(meta["tool_routing"]["exposed"])} if "tool_routing" in meta else {}))
        if stream:
            events = sse_passthrough(result, meta) if result.response is not None else json_as_sse(result, meta)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        answer = dict(result.body)
        answer["model"], answer["switchcraft"] = result.model, meta
        return JSONResponse(answer, headers=headers)

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


async def sse_passthrough(result: UpstreamResult, meta: dict) -> AsyncIterator[bytes]:
    """The upstream's SSE events as they come, each chunk's `model` set to the answering model."""
    response, first = result.response, True
    try:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data and data != "[DONE]":
                    try:
                        chunk = json.loads(data)
                    except json.JSONDecodeError:
                        chunk = None
                    if isinstance(chunk, dict):
                        chunk["model"] = result.model
                        if first:
                            chunk["switchcraft"], first = meta, False
                        line = "data: " + json.dumps(chunk, separators=(",", ":"))
            yield (line + "\n").encode()
    except httpx.TransportError as e:
        # Bytes already reached the caller: no fallback now, but say so in-band.
        error = {"error": {"message": f"upstream {result.model} stream broke: {type(e).__name__}", "type": "upstream_error"}}
        yield f"data: {json.dumps(error)}\n\n".encode()
    finally:
        await response.aclose()


async def json_as_sse(result: UpstreamResult, meta: dict) -> AsyncIterator[bytes]:
    """An upstream that answered a stream request with one JSON body: the same answer as one SSE chunk."""
    body = result.body
    choices = []
    for i, choice in enumerate(body.get("choices") or []):
        message = dict(choice.get("message") or {})
        if message.get("tool_calls"):
            message["tool_calls"] = [{**tc, "index": k} for k, tc in enumerate(message["tool_calls"])]
        choices.append({"index": choice.get("index", i), "delta": message, "finish_reason": choice.get("finish_reason")})
    chunk = {"id": body.get("id"), "object": "chat.completion.chunk", "created": body.get("created"),
             "model": result.model, "choices": choices, "switchcraft": meta}
    if body.get("usage") is not None:
        chunk["usage"] = body["usage"]
    yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
    yield b"data: [DONE]\n\n"
