"""The Keys view: the state store's API keys with their limits and today's spend, and the forms an admin changes
them with.

    add_key_routes(router, gw, signed_in, page)    # serving/console/views.py console_routes
    GET  /console/keys                     the keys, today's spend per key against its limit, refusals (live)
    POST /console/keys                     create: id, role, tenant, rpm, usd_per_day, models → the key, shown once
    POST /console/keys/{id}/limits         rpm, usd_per_day, models (empty: no limit)          → 303 /console/keys
    POST /console/keys/{id}/revoke                                                             → 303 /console/keys

A POST is refused, before its body is read, when another site's page sent it (403: serving/console/guard.py
`cross_site`) or without an admin session (or `Authorization: Bearer <admin key>`): 303 to the login page. Its
body is a small urlencoded form (console.max_login_bytes). A change is written to the state store
(serving/core/managed_keys.py); this gateway applies it at once, the others within auth.refresh_s. A new key is
in the answer to its form only, never in a URL, a log line or a later page.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from markupsafe import Markup

from serving.console import charts
from serving.console.guard import HEADERS, Refused, cross_site, drain, read_form
from serving.console.live import live_traffic
from serving.console.logdb import DEFAULT_RANGE
from serving.console.queries import key_spend
from serving.core.managed_keys import add_key, list_keys, revoke_key, set_limits
from serving.core.state import StateUnavailable, utc_day

log = logging.getLogger("switchcraft.gateway")
CREATE = ("id", "role", "tenant", "rpm", "usd_per_day", "models")
LIMITS = ("rpm", "usd_per_day", "models")


async def keys_data(gw, params, since: float, now: float, labels=None) -> dict[str, Any]:
    """Today's spend per key from the ledger, and the store's keys (when this gateway reads its keys there)."""
    try:
        rows = await gw.state.ledger(day=utc_day(now))
        stored = await list_keys(gw.state) if gw.keys.feed is not None else None
    except (StateUnavailable, ValueError) as e:
        return {"message": f"the keys and the ledger cannot be read now: {e}"}
    limits = {i.key_id: i.limits.usd_per_day for i in gw.keys.identities()}
    explore = gw.cfg.explore.usd_per_day if gw.cfg.explore.rate > 0 else None
    k = key_spend(rows, now=now, limits=limits, explore_usd_per_day=explore)
    spent = {t["key"]: t["usd"] for t in k["keys"]}
    managed = None if stored is None else [
        {"id": m.stored.id, "role": m.entry.role, "tenant": m.entry.caller.tenant, "limits": m.entry.limits,
         "models": ", ".join(m.entry.limits.models or []), "spent": spent.get(m.stored.id, 0.0),
         "created": m.stored.created, "updated": m.stored.updated, "revoked": m.stored.revoked,
         "source": m.stored.source, "hash": m.hash_prefix} for m in stored]
    chart = charts.bars([(t["key"], t["usd"]) for t in k["keys"]], title=f"spend per key on {k['day']}", unit="USD")
    return {"k": k, "chart_keys": Markup(chart), "live": live_traffic(gw), "durable": gw.state.durable,
            "managed": managed, "pool": gw.pool.names}


def _number(raw: str, field: str, kind) -> Any:
    if not raw.strip():
        return None
    try:
        return kind(raw.strip())
    except ValueError:
        raise ValueError(f"{field} {raw.strip()[:40]!r}: give a {'whole ' if kind is int else ''}number, or leave it "
                         "empty for no limit") from None


def limits_of(form: dict[str, str]) -> dict[str, Any]:
    """The form's limits (an empty field: no limit); ValueError naming the field."""
    models = [m.strip() for m in form["models"].split(",") if m.strip()]
    return {"requests_per_minute": _number(form["rpm"], "rpm", int),
            "usd_per_day": _number(form["usd_per_day"], "usd_per_day", float), "models": models or None}


def add_key_routes(router: APIRouter, gw, signed_in, page) -> None:
    """The Keys view's three POST forms on the console's router."""
    limit = gw.cfg.console.max_login_bytes

    async def keys_page(who: str, status: int = 200, **extra) -> Response:
        now = time.time()
        ctx = {"view": "keys", "who": who, "range": DEFAULT_RANGE, "now": now,
               **await keys_data(gw, {}, 0.0, now), **extra}
        return page("empty.html" if "message" in ctx else "keys.html", status, **ctx)

    async def admitted(request: Request, fields: tuple[str, ...]) -> tuple[str, dict[str, str]] | Response:
        """(the admin's key id, the form), or the answer instead: 403 another site, the login page, 413 / 415."""
        if why := cross_site(request, gw.cfg.console.origins):
            await drain(request, limit)
            return page("empty.html", 403, {"connection": "close"}, view="keys", who=None, range=DEFAULT_RANGE,
                        message=f"Refused: {why}. Change keys from this gateway's own Keys page.")
        who = await signed_in(request)
        if isinstance(who, RedirectResponse):
            await drain(request, limit)
            return RedirectResponse("/console/login?next=/console/keys", status_code=303, headers=HEADERS)
        if isinstance(who, Response):
            return who
        if gw.keys.feed is None:
            await drain(request, limit)
            return await keys_page(who, 409, error="this gateway's keys are not kept in a state store (auth.mode "
                                   "none, or keys handed to the app): they cannot be changed here")
        try:
            return who, await read_form(request, limit, fields)
        except Refused as e:
            return await keys_page(who, e.status, error=e.message)

    async def changed(who: str, action: str, key_id: str) -> None:
        log.info(json.dumps({"event": "console_keys", "action": action, "key": key_id, "by": who}))
        try:
            await gw.keys.feed.reload()  # this gateway at once; the others within auth.refresh_s
        except StateUnavailable:
            pass  # written; the next refresh loads it

    @router.post("/keys")
    async def create(request: Request) -> Response:
        got = await admitted(request, CREATE)
        if isinstance(got, Response):
            return got
        who, form = got
        try:
            limits = {k: v for k, v in limits_of(form).items() if v is not None}
            key = await add_key(gw.state, form["id"].strip(), role=form["role"] or "caller",
                                caller={"tenant": form["tenant"].strip()}, limits=limits, pool_names=gw.pool.names,
                                now=time.time())
        except ValueError as e:
            return await keys_page(who, 400, error=str(e))
        except StateUnavailable as e:
            return await keys_page(who, 503, error=f"the state store cannot take the key now: {e}")
        await changed(who, "create", form["id"].strip())
        return await keys_page(who, created={"id": form["id"].strip(), "key": key})

    @router.post("/keys/{key_id}/limits")
    async def limits(request: Request, key_id: str) -> Response:
        got = await admitted(request, LIMITS)
        if isinstance(got, Response):
            return got
        who, form = got
        try:
            await set_limits(gw.state, key_id, limits_of(form), gw.pool.names, now=time.time())
        except ValueError as e:
            return await keys_page(who, 400, error=f"{key_id}: {e}")
        except StateUnavailable as e:
            return await keys_page(who, 503, error=f"the state store cannot take the change now: {e}")
        await changed(who, "limits", key_id)
        return RedirectResponse("/console/keys", status_code=303, headers=HEADERS)

    @router.post("/keys/{key_id}/revoke")
    async def revoke(request: Request, key_id: str) -> Response:
        got = await admitted(request, ())
        if isinstance(got, Response):
            return got
        who, _ = got
        try:
            await revoke_key(gw.state, key_id, now=time.time())
        except ValueError as e:
            return await keys_page(who, 404, error=str(e))
        except StateUnavailable as e:
            return await keys_page(who, 503, error=f"the state store cannot take the revocation now: {e}")
        await changed(who, "revoke", key_id)
        return RedirectResponse("/console/keys", status_code=303, headers=HEADERS)
