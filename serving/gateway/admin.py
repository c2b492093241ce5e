"""The operator's endpoints: health, readiness, metrics, the spend ledger, a router reload.

    GET  /healthz                 always 200 while the process serves
    GET  /readyz                  200 when the router answers and an upstream endpoint's breaker is not open (503
                                  otherwise); details (backend, router version, endpoints, state) for an admin key
    GET  /metrics                 Prometheus text (admin key)
    GET  /v1/admin/spend          the ledger of `key` on `day` and its totals (admin key)
    POST /v1/admin/reload         serve another router directory: {"dir": …}, default router.dir (admin key);
                                  409 for a router `switchcraft learn` said to keep out of service, unless
                                  {"force": true}
    POST /v1/admin/rollback       serve the router served before the last reload again (admin key); 409 when
                                  nothing was reloaded since start

Each is a plain function of the gateway's parts (serving/gateway/parts.py) and the request.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from serving.core.auth import admin_of
from serving.core.budget import spend_report
from serving.core.errors import GatewayError
from serving.gateway.parts import Gateway
from serving.gateway.reload import RolloutRefused
from serving.core.state import StateUnavailable

DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


async def is_admin(gw: Gateway, request: Request) -> bool:
    try:
        await admin_of(gw, request)
    except GatewayError:
        return False
    return True


def missing_credentials(pool) -> dict[str, str]:
    """Pool model → the provider-key variable it names (`api_key_env`) that is not set in the environment."""
    return {m.name: m.api_key_env for m in pool.models if m.api_key_env and not os.environ.get(m.api_key_env)}


async def readyz(gw: Gateway, request: Request) -> Response:
    """Ready: the router answers, at least one pool model has its provider key (or needs none) and at least one
    upstream endpoint's breaker is not open. Details (backend, router version, upstream endpoints, the provider
    keys not set, the state store) only for an admin key."""
    client = gw.slot.client
    router_ready = await anyio.to_thread.run_sync(client.ready)
    circuits = gw.upstreams.breakers.states()
    missing = missing_credentials(gw.pool)
    callable_models = len(gw.pool.models) - len(missing)
    ready = router_ready and callable_models > 0 and any(s != "open" for s in circuits.values())
    body: dict[str, Any] = {"ready": ready, "router": router_ready, "credentials": callable_models > 0}
    if callable_models == 0:
        body["reason"] = ("no pool model has its provider key: export the variables the pool file names "
                          "(api_key_env), e.g. " + ", ".join(sorted(set(missing.values()))[:4]))
    if await is_admin(gw, request):
        body["missing_credentials"] = missing
        try:
            await gw.state.ping()
            store_ok = True
        except StateUnavailable:
            store_ok = False
        body.update(backend=client.backend.name, router_version=client.version, upstreams=circuits,
                    state={"store": gw.state.name, "durable": gw.state.durable, "reachable": store_ok})
    return JSONResponse(body, status_code=200 if ready else 503)


async def prometheus(gw: Gateway, request: Request) -> Response:
    """Prometheus text; an admin key only (it names key ids, spend and upstream endpoints)."""
    try:
        await admin_of(gw, request)
    except GatewayError as e:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
    return Response(gw.metrics.render(), media_type=gw.metrics.content_type)


async def reload(gw: Gateway, request: Request) -> Response:
    """Serve another router directory from now on (admin keys): `{"dir": …}`, default router.dir."""
    try:
        await admin_of(gw, request)
        raw = await request.body()
        body = json.loads(raw) if raw.strip() else {}
        where = body.get("dir") if isinstance(body, dict) else None
        if where is not None and not isinstance(where, str):
            raise GatewayError(400, "dir: must be a string (a router directory)", param="dir")
        force = body.get("force", False) if isinstance(body, dict) else False
        if not isinstance(force, bool):
            raise GatewayError(400, "force: must be true or false", param="force")
        out = await gw.slot.reload(where, force=force)
    except GatewayError as e:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
    except RolloutRefused as e:
        return JSONResponse(GatewayError(409, f"router not reloaded: {e}", type="rollout_refused", param="force").body(),
                            status_code=409)
    except json.JSONDecodeError:
        return JSONResponse(GatewayError(400, "body: not JSON", param="body").body(), status_code=400)
    except ValueError as e:
        return JSONResponse(GatewayError(422, f"router not reloaded: {e}", param="dir").body(), status_code=422)
    return JSONResponse(out)


async def rollback(gw: Gateway, request: Request) -> Response:
    """The router served before the last reload, served again (admin keys)."""
    try:
        await admin_of(gw, request)
        out = await gw.slot.rollback()
    except GatewayError as e:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
    except ValueError as e:
        return JSONResponse(GatewayError(409, f"router not rolled back: {e}", type="no_earlier_router").body(),
                            status_code=409)
    return JSONResponse(out)

async def spend(gw: Gateway, request: Request, key: str | None, day: str | None) -> Response:
    """The ledger (admin keys): every charge of `key` (an id) on `day` (YYYY-MM-DD, UTC), and their totals."""
    try:
        await admin_of(gw, request)
        if day is not None and not DAY.fullmatch(day):
            raise GatewayError(400, f"day: {day!r} is not a UTC date YYYY-MM-DD", param="day")
        rows = await gw.state.ledger(key_id=key, day=day)
    except GatewayError as e:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
    except StateUnavailable as e:
        gw.metrics.state_errors.labels(op="ledger").inc()
        return JSONResponse(GatewayError(503, f"the ledger cannot be read now: {e}", type="state_unavailable").body(),
                            status_code=503, headers={"retry-after": "2"})
    return JSONResponse(spend_report(rows))
