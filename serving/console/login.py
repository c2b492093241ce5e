"""The console's login and logout: the routes that take an admin key and end a session.

    add_login_routes(router, gw, sessions, page)    # serving/console/views.py console_routes

POST /console/login refuses, before any key is read (serving/console/guard.py), another site's form (403), a
client over its failed-login allowance (429), anything but a small urlencoded form (415, 413); a wrong key and a
caller's key then get the same 401 page. POST /console/logout refuses another site's form, revokes the session
in the state store (serving/console/session.py) and clears the cookie; it never reads its body.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import time

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from serving.console.guard import (HEADERS, LoginThrottle, Refused, cross_site, drain, https, read_form,
                                   retry_after)
from serving.console.session import COOKIE, Sessions, revoke
from serving.core.errors import GatewayError
from serving.core.state import StateUnavailable

log = logging.getLogger("switchcraft.gateway")
REFUSED = "That is not an admin key of this gateway."  # the same words for an unknown key and a caller's key
NEXT = re.compile(r"/console/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")  # no `%`, backslash, `:` or query: nothing decodes
HOME = "/console/savings"


def console_path(path: str) -> str:
    """A console path to go to after login. Anything else goes to the Savings view: another site, a path that
    leaves /console once a browser or proxy resolves it (`..`, `//`, a backslash), an encoded form of one."""
    return path if NEXT.fullmatch(path) and posixpath.normpath(path) == path else HOME


def add_login_routes(router: APIRouter, gw, sessions: Sessions, page) -> None:
    """GET and POST /login, POST /logout on the console's router; `page(name, status, headers, **ctx)` renders."""
    bounds = gw.cfg.console
    throttle = LoginThrottle(bounds.login_failures_per_address, bounds.login_failures_total)

    def login_page(status: int, error: str | None, nxt: str = HOME, headers=None) -> HTMLResponse:
        return page("login.html", status, headers, next=nxt, error=error, who=None, hours=sessions.max_age_s / 3600)

    @router.get("/login")
    async def login_form(next: str = HOME) -> HTMLResponse:
        return login_page(200, None, console_path(next))

    @router.post("/login")
    async def login(request: Request) -> Response:
        address, now = request.client.host if request.client else "", time.time()
        try:
            if why := cross_site(request, bounds.origins):
                raise Refused(403, f"Refused: {why}. Log in from this gateway's own login page.",
                              {"connection": "close"})
            if wait := throttle.admit(address, now):
                gw.metrics.auth_rejections.labels(key="", reason="console_throttled").inc()
                raise Refused(429, f"Too many failed logins in the last minute; try again in {retry_after(wait)} s.",
                              {"retry-after": retry_after(wait), "connection": "close"})
            form = await read_form(request, bounds.max_login_bytes)
        except Refused as e:
            log.warning(json.dumps({"event": "console_login", "ok": False, "status": e.status}))
            if e.status in (403, 429):  # refused before the form was read: read a small one, so the refusal arrives
                await drain(request, bounds.max_login_bytes)
            return login_page(e.status, e.message, headers=e.headers)
        key, nxt = form["key"].strip(), console_path(form["next"])
        try:
            ident = await gw.keys.verify(f"Bearer {key}") if key else None
        except GatewayError:
            ident = None
        if ident is None or not ident.admin:
            gw.metrics.auth_rejections.labels(key="", reason="console_login").inc()
            log.warning(json.dumps({"event": "console_login", "ok": False}))
            return login_page(401, REFUSED, nxt)
        throttle.succeeded(address, now)
        log.info(json.dumps({"event": "console_login", "ok": True, "key": ident.key_id}))
        out = RedirectResponse(nxt, status_code=303, headers=HEADERS)
        out.set_cookie(COOKIE, sessions.issue(ident.key_id, now=time.time()), max_age=sessions.max_age_s,
                       path="/console", httponly=True, samesite="strict", secure=https(request))
        return out

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        if why := cross_site(request, bounds.origins):
            await drain(request, bounds.max_login_bytes)
            return login_page(403, f"Refused: {why}. Log out from this gateway's own pages.",
                              headers={"connection": "close"})
        now = time.time()
        session = sessions.read(request.cookies.get(COOKIE), now=now)
        out = RedirectResponse("/console/login", status_code=303, headers=HEADERS)
        if session is not None:
            try:
                await revoke(gw.state, session, now=now)
                log.info(json.dumps({"event": "console_logout", "key": session.key_id}))
            except StateUnavailable as e:
                out = page("empty.html", 503, view=None, who=None, message=f"Logged out in this browser, but the "
                           f"state store could not record the logout ({e}): a copy of the cookie stays valid until "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(session.exp))}.")
        out.delete_cookie(COOKIE, path="/console", httponly=True, samesite="strict", secure=https(request))
        if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers:
            await drain(request, bounds.max_login_bytes)
            out.headers["connection"] = "close"  # a larger body is left unread: it must not be taken for a request
        return out
