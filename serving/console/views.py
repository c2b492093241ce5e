"""The console's routes: a login page, then one page per view, all under /console on the gateway's port.

    app.include_router(console_routes(gw))        # serving/console/__init__.py mount(app, gw)

GET  /console/login            the form that takes an admin key once (POST /console/login sets the session)
POST /console/logout           ends the session (revoked in the state store: a copy of the cookie is refused too)
GET  /console/{view}           savings | quality | traffic | keys | requests | router   (?range=1h|24h|7d|30d|all)
GET  /console/requests/{id}    one request's trace
POST /console/keys[/{id}/limits | /{id}/revoke]   the Keys view's forms (serving/console/keys.py)

A page needs a session cookie (serving/console/session.py) or an admin key in `Authorization: Bearer`; without
either it redirects to the login page. The key is read from the form body only (never a URL) and never logged.
Login and logout (serving/console/login.py) refuse another site's form (403); login refuses failed logins past
their allowance (429) and more than a small form's worth of body (413) before any key is read
(serving/console/guard.py; bounds: `console:` in the config).
Queries run in a worker thread, off the event loop (serving/console/queries.py).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from serving.console import charts
from serving.console.guard import HEADERS
from serving.console.headline import MIN_EXPLORED, MIN_HOURS, headline, money
from serving.console.keys import add_key_routes, keys_data
from serving.console.rollback import add_rollback_route
from serving.console.live import live_router, live_traffic
from serving.console.logdb import DEFAULT_RANGE, RANGES, open_log, since_of
from serving.console.quality import QualityCache
from serving.console.search import search_requests, timeline
from serving.console.queries import cascades, filter_values, router_versions, trace, traffic, version_costs
from serving.console.login import REFUSED, add_login_routes  # noqa: F401 - REFUSED: the login page's words
from serving.console.session import COOKIE, Sessions, revoked
from serving.core.auth import admin_of
from serving.core.errors import GatewayError
from serving.core.state import StateUnavailable

log = logging.getLogger("switchcraft.gateway")
VIEWS = ("savings", "quality", "traffic", "keys", "requests", "router")
QUALITY_TTL_S = 30.0  # consensus labels are reused this long across Savings, Quality and Router (quality.py)


def templates() -> Environment:
    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=select_autoescape())
    env.filters["usd"] = money
    env.filters["pct"] = lambda v: "—" if v is None else f"{100 * v:.1f}%"
    env.filters["ms"] = lambda v: "—" if v is None else f"{v:,.1f} ms"
    env.filters["when"] = lambda ts: time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) if ts else "—"
    env.filters["pretty"] = lambda v: json.dumps(v, indent=1, ensure_ascii=False, default=str)
    return env


def console_routes(gw, sessions: Sessions | None = None) -> APIRouter:
    sessions = sessions or Sessions.from_env(max_age_s=gw.cfg.console.session_max_age_s)
    env, router = templates(), APIRouter(prefix="/console", include_in_schema=False)
    labels = QualityCache(QUALITY_TTL_S)

    def page(name: str, status: int = 200, headers: dict[str, str] | None = None, **ctx) -> HTMLResponse:
        html = env.get_template(name).render(views=VIEWS, ranges=list(RANGES), **ctx)
        return HTMLResponse(html, status_code=status, headers={**HEADERS, **(headers or {})})

    async def admin_id(request: Request) -> str | None:
        """The admin key id this request acts as: its session's or its Authorization header's (None: neither).
        StateUnavailable when the session's revocation cannot be checked."""
        if gw.keys.mode == "none":
            return gw.keys.local.key_id
        if request.headers.get("authorization"):
            try:
                return (await admin_of(gw, request)).key_id
            except GatewayError:
                return None
        now = time.time()
        session = sessions.read(request.cookies.get(COOKIE), now=now)
        await gw.keys.refresh()  # a revoked admin key's sessions end with it
        admins = {i.key_id for i in gw.keys.identities() if i.admin}
        if session is None or session.key_id not in admins:
            return None
        return None if await revoked(gw.state, session, now=now) else session.key_id

    async def signed_in(request: Request) -> str | Response:
        """The admin key id, or the response instead of the page: the login page, or 503 when the state store
        cannot say whether the session was logged out."""
        try:
            who = await admin_id(request)
        except StateUnavailable as e:
            return page("empty.html", 503, view=None, who=None, message=f"the session cannot be checked now (the "
                        f"state store holds logouts): {e}; a page also accepts Authorization: Bearer <admin key>")
        if who is None:
            return RedirectResponse(f"/console/login?next={quote(request.url.path)}", status_code=303,
                                    headers=HEADERS)
        return who

    add_login_routes(router, gw, sessions, page)
    add_key_routes(router, gw, signed_in, page)  # the Keys view's forms: create, change limits, revoke
    add_rollback_route(router, gw, signed_in, page)  # the Router view's rollback

    @router.get("")
    @router.get("/")
    async def home(request: Request) -> Response:
        return RedirectResponse("/console/savings", status_code=303, headers=HEADERS)

    @router.get("/requests/{request_id}")
    async def request_trace(request: Request, request_id: str) -> Response:
        who = await signed_in(request)
        if isinstance(who, Response):
            return who
        found = await _query(gw, lambda db: trace(db, request_id))
        if isinstance(found, str):
            return page("empty.html", view="requests", who=who, range=DEFAULT_RANGE, message=found)
        if found is None:
            return page("empty.html", 404, view="requests", who=who, range=DEFAULT_RANGE,
                        message=f"no request {request_id} in the decision log")
        return page("trace.html", view="requests", who=who, range=DEFAULT_RANGE, t=found, line=timeline(found),
                    text_kept=gw.cfg.log.requests)

    @router.get("/{view}")
    async def view_page(request: Request, view: str, range: str = DEFAULT_RANGE) -> Response:
        who = await signed_in(request)
        if isinstance(who, Response):
            return who
        if view not in VIEWS:
            return page("empty.html", 404, view=view, who=who, range=DEFAULT_RANGE,
                        message=f"no view {view!r}; the views: {', '.join(VIEWS)}")
        if range not in RANGES:
            return page("empty.html", 400, view=view, who=who, range=DEFAULT_RANGE,
                        message=f"range {range!r}: give one of {', '.join(RANGES)}")
        now = time.time()
        ctx: dict[str, Any] = {"view": view, "who": who, "range": range, "now": now}
        try:
            ctx.update(await VIEW_DATA[view](gw, request.query_params, since_of(range, now), now, labels))
        except ValueError as e:
            return page("empty.html", 400, message=str(e), **ctx)
        if "message" in ctx:
            return page("empty.html", **ctx)
        return page(f"{view}.html", **ctx)

    return router


def log_source(gw) -> str | None:
    """The decision log the gateway writes: its PostgreSQL URL (log.url: every replica's rows) or its folder."""
    return gw.cfg.log.url or gw.cfg.log.path


async def _query(gw, fn, since: float = 0.0):
    """fn(db) over the decision log from `since` on, in a worker thread; a message string when there is no log, or
    when its PostgreSQL server cannot be reached."""
    source = log_source(gw)
    if not source:
        return ("the gateway keeps no decision log (log.path and log.url are null): set log.path, or log.url for "
                "a fleet's, to see this view")

    def run():
        try:
            with open_log(source, since) as db:
                return fn(db)
        except FileNotFoundError:
            return no_requests(gw)
        except ConnectionError as e:
            log.warning(json.dumps({"event": "console_log_unavailable", "error": str(e)}))
            return f"the decision log cannot be read now: {e}"
    return await anyio.to_thread.run_sync(run)


def no_requests(gw, where: str = "") -> str:
    """The empty gateway's page: what to do next."""
    auth = "" if gw.keys.mode == "none" else " -H 'Authorization: Bearer <a caller key>'"
    return (f"no requests yet{where}: send one with curl http://{gw.cfg.host}:{gw.cfg.port}/v1/chat/completions"
            f"{auth} -H 'Content-Type: application/json' -d '{{\"messages\": [{{\"role\": \"user\", \"content\": "
            f"\"Weather in Paris?\"}}], \"tools\": [...]}}' (a key: switchcraft gateway-key); it appears here "
            "once logged")


def _data(result) -> dict[str, Any]:
    return {"message": result} if isinstance(result, str) else result


async def savings_data(gw, params, since: float, now: float, labels: QualityCache) -> dict[str, Any]:
    asked = params.get("ref") or None
    if asked is not None and asked not in gw.pool.names:
        raise ValueError(f"ref {asked!r} is not a model of the served pool; the pool: {', '.join(gw.pool.names)}")
    info = gw.slot.client.info
    def figures(db):
        per_model = None if asked else labels.get(db, log_source(gw), since=since, now=now,
                                                   pool_names=gw.pool.names)["per_model"]
        return {"s": headline(db, gw.pool, since=since, now=now, reference=asked, router_info=info,
                              per_model=per_model)}
    out = _data(await _query(gw, figures, since))
    if "s" in out and out["s"]["requests"] == 0 and not out["s"]["explore_calls"]:
        return {"message": no_requests(gw, " in this range")}
    if "s" in out:
        s, ref = out["s"], out["s"]["reference"]["model"]
        out["ref"], out["min_hours"] = asked, MIN_HOURS
        out["chart_day"] = Markup(charts.columns([r["group"] for r in s["per_day"]], {
            "spent": [r["spent_usd"] for r in s["per_day"]],
            f"all to {ref} (estimate)": [r["reference_usd"] for r in s["per_day"]]}, title="spend vs reference",
            unit="USD"))
        out["chart_key"] = Markup(charts.bars([(r["group"] or "(none)", r["saved_usd"]) for r in s["per_key"]],
                                              title="saved per key before exploration (estimate)", unit="USD"))
    return out


async def quality_data(gw, params, since: float, now: float, labels: QualityCache) -> dict[str, Any]:
    def both(db):
        return {"q": labels.get(db, log_source(gw), since=since, now=now, pool_names=gw.pool.names),
                "c": cascades(db, since=since, now=now)}
    out = _data(await _query(gw, both, since))
    out["text_kept"], out["explore"] = gw.cfg.log.requests, gw.cfg.explore
    out["min_explored"] = MIN_EXPLORED
    if "q" in out:
        q, c = out["q"], out["c"]
        rows = [("served answers", q["served"]["mean"], q["served"]["low"], q["served"]["high"], q["served"]["n"])]
        rows += [(m["model"], m["mean"], m["low"], m["high"], m["n"]) for m in q["per_model"]]
        out["chart_q"] = Markup(charts.intervals(rows, title="agreement with consensus (95% interval)"))
        out["chart_kinds"] = Markup(charts.bars([(k["kind"], k["requests"]) for k in c["kinds"]],
                                                title="cascade disagreements by kind", unit="requests"))
    return out


async def traffic_data(gw, params, since: float, now: float, labels: QualityCache) -> dict[str, Any]:
    out = _data(await _query(gw, lambda db: {"t": traffic(db, since=since, now=now)}, since))
    if "t" in out and out["t"]["requests"] == 0:
        out = {"message": no_requests(gw, " in this range")}
    out["live"] = live_traffic(gw)
    if "t" in out:
        t = out["t"]
        out["chart_time"] = Markup(charts.columns([r["group"] for r in t["over_time"]], {
            "requests": [r["requests"] for r in t["over_time"]], "errors": [r["errors"] for r in t["over_time"]]},
            title="requests", unit="requests"))
        out["chart_models"] = Markup(charts.bars([(m["name"], m["requests"]) for m in t["models"]],
                                                 title="answering model", unit="requests"))
        out["chart_strategies"] = Markup(charts.bars(charts.top_n([(m["name"], m["requests"]) for m in t["strategies"]]),
                                                     title="strategy (the top 10, then the rest)", unit="requests"))
        lat = t["latency_over_time"]
        out["chart_latency"] = Markup(charts.columns([r["group"] for r in lat], {
            "P50": [r["p50_ms"] or 0.0 for r in lat], "P99": [r["p99_ms"] or 0.0 for r in lat],
            "gateway P50": [r["overhead_p50_ms"] or 0.0 for r in lat],
            "gateway P99": [r["overhead_p99_ms"] or 0.0 for r in lat]},
            title="request latency over time, and the gateway's own part of it", unit="ms"))
        days = sorted({r["group"] for r in t["spend_per_key"]})
        keys = sorted({r["key"] for r in t["spend_per_key"]})
        cell = {(r["group"], r["key"]): r["usd"] for r in t["spend_per_key"]}
        out["key_days"] = {"days": days, "keys": keys, "cell": cell}

    return out


def _number(params, name: str, what: str) -> float | None:
    raw = params.get(name) or None
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} {raw!r}: give {what}") from None


async def requests_data(gw, params, since: float, now: float, labels: QualityCache) -> dict[str, Any]:
    chosen = {f: params.get(f) or None for f in ("key", "model", "strategy", "status", "q", "explored",
                                                  "cost_above", "latency_above")}
    if chosen["status"] is not None and not chosen["status"].isdigit():
        raise ValueError(f"status {chosen['status']!r}: give an HTTP status such as 200 or 429")
    if chosen["explored"] not in (None, "yes", "no"):
        raise ValueError(f"explored {chosen['explored']!r}: give yes or no")
    page = params.get("page") or "0"
    if not page.isdigit():
        raise ValueError(f"page {page!r}: give a page number from 0 (the newest)")
    cost, latency = _number(params, "cost_above", "USD, such as 0.01"), _number(params, "latency_above", "ms, such as 2000")
    status = int(chosen["status"]) if chosen["status"] else None
    explored = None if chosen["explored"] is None else chosen["explored"] == "yes"

    def both(db):
        found = search_requests(db, since=since, page=int(page), q=chosen["q"], key=chosen["key"],
                                model=chosen["model"], strategy=chosen["strategy"], status=status, explored=explored,
                                cost_above=cost, latency_above=latency)
        return {**found, "values": filter_values(db, since, now)}
    out = _data(await _query(gw, both, since))
    if out.get("rows") == [] and int(page) == 0 and not any(chosen.values()):
        out = {"message": no_requests(gw, " in this range")}
    query = {k: v for k, v in {"range": params.get("range") or DEFAULT_RANGE, **chosen}.items() if v}
    out.update(chosen=chosen, text_kept=gw.cfg.log.requests,
               prev_link="?" + urlencode({**query, "page": int(page) - 1}) if int(page) > 0 else None,
               next_link="?" + urlencode({**query, "page": int(page) + 1}) if out.get("more") else None)
    return out


async def router_data(gw, params, since: float, now: float, labels: QualityCache) -> dict[str, Any]:
    def figures(db):
        q = labels.get(db, log_source(gw), since=since, now=now, pool_names=gw.pool.names)["per_version"]
        cost = version_costs(db, since=since, now=now)
        versions = router_versions(db, since=since, now=now)
        for v in versions:
            v["quality"] = q.get(v["version"] or "")
            v["usd_per_request"] = (cost.get(v["version"] or "") or {}).get("usd_per_request")
        return {"versions": versions}
    out = _data(await _query(gw, figures, since))
    out.pop("message", None)  # the router panel needs no log
    out.setdefault("versions", [])
    out["live"] = r = live_router(gw)  # the slot's client: the router serving now, whatever was reloaded
    out.update(learned_router(Path(r["dir"]).parent / "learn.json" if r["dir"] else None))
    return out


def learned_router(path: Path | None) -> dict[str, Any]:
    """The last `switchcraft learn` beside the router in service: its comparison, and the rollout verdict it
    stamped into the learned router's router.json (else the one in learn.json)."""
    if path is None or not path.is_file():
        return {"learn": None, "rollout": None, "learn_path": str(path) if path else None}
    record = json.loads(path.read_text())
    comparison = record.get("comparison") or {}
    rollout = comparison.get("rollout")
    stamped = Path(record.get("router_onnx") or path.parent / "router_onnx") / "router.json"
    if stamped.is_file():
        rollout = json.loads(stamped.read_text()).get("rollout") or rollout
    return {"learn": comparison, "rollout": rollout, "learn_path": str(path)}


VIEW_DATA = {"savings": savings_data, "quality": quality_data, "traffic": traffic_data, "keys": keys_data,
             "requests": requests_data, "router": router_data}
