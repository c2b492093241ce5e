"""Reading what a request asks against its key, and the routing decision: POST /v1/route, and chat's routed plan.

    asked = await read_asked(gw, body, "constraints", ident)          # messages, tools, caller, allowed models
    routed = await decide(gw, asked, threshold, "constraints")        # the router's decision and its strategy
    response = await route_only(gw, request)                          # POST /v1/route: the decision only

The key decides the caller identity and the models; the body may only narrow
them (403 otherwise). With a tool catalog (serving/gateway/tools.py) the
catalog's tools for this caller replace the request's own before anything is
packed, costed or forwarded.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from data.schema import Message, Tool
from serving.backends import BackendError
from serving.gateway.admit import authenticate, read_body, request_id
from serving.core.auth import Identity, forbidden, narrow, restrict_models
from serving.gateway.cascade import MODEL_HEADER
from serving.core.errors import GatewayError, error_response
from serving.gateway.parts import Gateway
from serving.gateway.requests import check_route_fields, constraints_from, strategy_from, to_schema
from serving.gateway.tools import ToolRouted
from serving.policy import Constraints, Decision, NoEligibleModel
from serving.tools.policy import Caller
from training.policy import Strategy


@dataclass
class Asked:
    """A request read and checked against its key."""

    messages: list[Message]
    tools: list[Tool]  # what is packed, costed and forwarded: the catalog's routed set when there is a catalog
    who: Caller  # the key's identity narrowed by the body
    constraints: Constraints | None  # within the key's models
    requested: Strategy | None  # the body's own strategy (routed requests only)
    tooled: ToolRouted | None  # the tool routing, when there is a catalog
    allowed: frozenset[str] | None  # the pool models the caller's data may go to (None: any)


async def read_asked(gw: Gateway, body: dict, field: str, ident: Identity, named: str | None = None) -> Asked:
    """`field` (`switchcraft` in a chat body, `constraints` on /v1/route) read against the key. `named`: the pool
    model the body names instead of 'router': it takes no strategy, and the key must allow it."""
    cfg = gw.cfg
    messages, req_tools = to_schema(body.get("messages"), body.get("tools"), cfg.max_messages, cfg.max_tools)
    constraints, caller = constraints_from(body.get(field), gw.pool.names, field)
    requested = None
    if named is None:
        requested = strategy_from((body.get(field) or {}).get("strategy"), gw.pool.names, f"{field}.strategy")
    elif (body.get(field) or {}).get("strategy") is not None:
        raise GatewayError(400, f"{field}.strategy: applies to model 'router', not to the named model {named!r}",
                           param=f"{field}.strategy")
    who = who_asks(gw, ident, caller, field)
    if named is None:
        constraints = keyed_constraints(gw, constraints, ident, field)
        allowed = constraints.allowed_models if constraints is not None else None
    else:
        allowed = named_allowed(gw, ident, named)
    tooled = None
    if gw.tools is not None:  # tools first: the model router packs and costs the reduced set
        tooled = await anyio.to_thread.run_sync(lambda: gw.tools.route(messages, who))
        req_tools = tooled.tools
    return Asked(messages, req_tools, who, constraints, requested, tooled, allowed)


def who_asks(gw: Gateway, ident: Identity, asked: Any, field: str) -> Caller:
    """The key's identity narrowed by the body's caller field (403 if it would widen it)."""
    try:
        who = narrow(ident.caller, asked, f"{field}.caller")
        if gw.tools is not None:
            gw.tools.check_narrowing(who, ident.caller, f"{field}.caller")
    except GatewayError as e:
        if e.status == 403:
            gw.metrics.auth_rejections.labels(key=ident.key_id, reason="caller").inc()
        raise
    return who


def keyed_constraints(gw: Gateway, constraints: Constraints | None, ident: Identity,
                      field: str) -> Constraints | None:
    """The request's constraints within the key's allowed models."""
    allowed = constraints.allowed_models if constraints else None
    try:
        keyed = restrict_models(allowed, ident, f"{field}.allowed_models")
    except GatewayError:
        gw.metrics.auth_rejections.labels(key=ident.key_id, reason="model").inc()
        raise
    if keyed is allowed:
        return constraints
    return dataclasses.replace(constraints or Constraints(), allowed_models=keyed)


def named_allowed(gw: Gateway, ident: Identity, model: str) -> frozenset[str] | None:
    """The key's models, which must include the one the body names (403 otherwise)."""
    keyed = ident.limits.models
    if keyed is not None and model not in keyed:
        gw.metrics.auth_rejections.labels(key=ident.key_id, reason="model").inc()
        raise forbidden("model", f"{model!r} is not allowed for this API key (it may use: {', '.join(keyed)})",
                        "model")
    return frozenset(keyed) if keyed is not None else None


def pick_strategy(gw: Gateway, decision: Decision, requested: Strategy | None, field: str) -> tuple[str, str | None]:
    """(source, note): the request's strategy, else router.cascade, else the decision's own."""
    forced = gw.forced
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


async def decide(gw: Gateway, asked: Asked, threshold: float | None, field: str):
    """The router's decision for `asked` (the batcher's Routed: decision, tools, extra), with the strategy to run;
    422 when no model is eligible, 503 when the router backend is down."""
    t0 = time.perf_counter()
    try:
        routed = await gw.slot.batcher.route(asked.messages, asked.tools, asked.constraints, threshold=threshold)
    except NoEligibleModel as e:
        raise GatewayError(422, str(e), param=field) from None
    except BackendError as e:
        gw.metrics.router_unavailable.inc()
        raise GatewayError(503, f"router backend unavailable: {e}", type="router_unavailable") from None
    gw.metrics.routing_latency.observe(time.perf_counter() - t0)
    gw.metrics.decisions.labels(model=routed.decision.chosen, rule=routed.decision.rule).inc()
    source, note = pick_strategy(gw, routed.decision, asked.requested, field)
    routed.extra["strategy_source"] = source
    if note:
        routed.extra["strategy_note"] = note
    if asked.tooled is not None:
        routed.tools = asked.tooled.decision.exposed_names
        routed.extra["tool_routing"] = asked.tooled.trace()
    if gw.tool_selector is not None:
        selector = gw.tool_selector
        routed.tools = await anyio.to_thread.run_sync(lambda: selector(asked.messages, asked.tools, asked.who))
    return routed


async def route_only(gw: Gateway, request: Request) -> Response:
    """POST /v1/route: the decision (chosen model, ranking, strategy, costs), no upstream call."""
    started, rid = time.perf_counter(), request_id(request)
    ident = None
    try:
        ident = await authenticate(gw, request)
        body = await read_body(gw, request)
        check_route_fields(body)
        routed = await decide(gw, await read_asked(gw, body, "constraints", ident), body.get("threshold"),
                              "constraints")
    except GatewayError as e:
        gw.finish("route", e.status, started, rid, ident, error=e.message if e.status >= 500 else e.param)
        return error_response(e, rid)
    out = routed.to_dict()
    gw.finish("route", 200, started, rid, ident, chosen=routed.decision.chosen, rule=routed.decision.rule,
              routing_ms=round(routed.latency_ms, 2), n_tokens=routed.n_tokens)
    return JSONResponse(out, headers={MODEL_HEADER: routed.decision.chosen, "x-request-id": rid})
