"""The Router view's rollback: the router served before the last reload, served again.

    add_rollback_route(router, gw, signed_in, page)     # serving/console/views.py console_routes
    POST /console/router/rollback                        → 303 /console/router (or the Router page with the error)

Refused, before anything is read, when another site's page sent it (403: serving/console/guard.py `cross_site`)
or without an admin session (303 to the login page); the form has no fields. The slot reloads the previous
directory forced (it was in service; serving/gateway/reload.py `RouterSlot.rollback`) and, with several workers,
publishes it to the others as a reload does.
"""

from __future__ import annotations

import json
import logging

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from serving.console.guard import HEADERS, cross_site, drain
from serving.console.logdb import DEFAULT_RANGE

log = logging.getLogger("switchcraft.gateway")
BODY_BYTES = 1024  # the form has no fields: anything larger is drained up to this and ignored


def add_rollback_route(router: APIRouter, gw, signed_in, page) -> None:
    @router.post("/router/rollback")
    async def rollback(request: Request) -> Response:
        if why := cross_site(request, gw.cfg.console.origins):
            await drain(request, BODY_BYTES)
            return page("empty.html", 403, {"connection": "close"}, view="router", who=None, range=DEFAULT_RANGE,
                        message=f"Refused: {why}. Roll back from this gateway's own Router page.")
        who = await signed_in(request)
        await drain(request, BODY_BYTES)
        if isinstance(who, RedirectResponse):
            return RedirectResponse("/console/login?next=/console/router", status_code=303, headers=HEADERS)
        if isinstance(who, Response):
            return who
        try:
            out = await gw.slot.rollback()
        except ValueError as e:
            return page("empty.html", 409, view="router", who=who, range=DEFAULT_RANGE,
                        message=f"Not rolled back: {e}.")
        log.info(json.dumps({"event": "console_rollback", "by": who, "router_version": out["router_version"],
                             "from_version": out["previous_version"], "dir": out["dir"]}))
        return RedirectResponse("/console/router", status_code=303, headers=HEADERS)
