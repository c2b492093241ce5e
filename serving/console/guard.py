"""What the console's login and logout refuse before they look at a key: another site's form, a client over its
failed-login allowance, a body that is not a small form.

    why = cross_site(request, cfg.console.origins)      # None, or why the POST is refused (403)
    wait = throttle.admit(address, now)                 # 0.0 (counted as a failure), or the seconds to wait (429)
    form = await read_form(request, cfg.console.max_login_bytes)   # {"key": ..., "next": ...}; Refused 413 / 415
    throttle.succeeded(address, now)                    # an admin key: the attempt no longer counts

Cross-site: a browser says where the form that it posts comes from (`Sec-Fetch-Site`; else `Origin`, which the
pages' `Referrer-Policy: same-origin` keeps; else `Referer`), and another site's page must not log the admin out,
or in with a key of its choosing. A request that names none came
from no browser (curl, scripts) and cannot carry a victim's cookie, so it passes.

The body is read from the stream and never past the bound: a declared length over it is refused unread, a body
without one is refused as soon as it passes it, so a hostile post costs at most the bound in memory.

Failed logins are counted per process in a sliding minute, per client address (the socket's peer: behind a
proxy every client shares the proxy's address) and in all; the count of addresses is bounded by the total's
allowance, since failures past it are refused, not counted.
"""

from __future__ import annotations

import math
from collections import deque
from urllib.parse import parse_qs, urlsplit

from fastapi import Request

FORM = "application/x-www-form-urlencoded"
# Every console answer: never cached, never framed, fetches nothing, and keeps `Origin` on its own forms' posts
# (no-referrer would make the browser send `Origin: null`, which cross_site refuses).
HEADERS = {"cache-control": "no-store", "x-frame-options": "DENY", "referrer-policy": "same-origin",
           "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                                      "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"}
WINDOW_S = 60.0
FIELDS = ("key", "next")


class Refused(Exception):
    """A console POST refused before its key is read: the status and a message that says what would be taken."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def https(request: Request) -> bool:
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"


def _origin(scheme: str, netloc: str) -> str:
    scheme, netloc = scheme.lower(), netloc.lower().rstrip(".")
    default = {"http": ":80", "https": ":443"}.get(scheme)
    if default and netloc.endswith(default):
        netloc = netloc[: -len(default)]
    return f"{scheme}://{netloc}"


def _origin_of(url: str) -> str | None:
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    return _origin(parts.scheme, parts.netloc) if parts.scheme and parts.netloc else None


def cross_site(request: Request, origins: list[str]) -> str | None:
    """None when the POST came from the gateway's own pages (or from no browser); else why it is refused."""
    own = {_origin("https" if https(request) else "http", request.headers.get("host", ""))}
    own |= {o for o in map(_origin_of, origins) if o}
    site = request.headers.get("sec-fetch-site")
    if site is not None:  # set by the browser itself, and right behind a proxy that rewrites Host
        return None if site in ("same-origin", "none") else f"the form was posted from another site ({site[:40]})"
    origin = request.headers.get("origin")
    if origin is not None:
        return None if _origin_of(origin) in own else f"the form was posted from another site (Origin: {origin[:100]})"
    referer = request.headers.get("referer")
    if referer is not None and _origin_of(referer) not in own:
        return "the form was posted from another site (Referer)"
    return None


async def drain(request: Request, limit: int) -> None:
    """Read and discard a refused request's body when it is small (at most `limit` bytes): closing a connection
    with input still unread makes the kernel answer with a reset, which can reach the client before the refusal
    does (it sees the connection dropped, not the 403/429). A larger body is left unread and the connection closed."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return
    seen = 0
    try:
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > limit:
                return
    except Exception:  # noqa: BLE001 - the client went away or the body was already read: nothing left to drain
        return


async def read_form(request: Request, limit: int, fields: tuple[str, ...] = FIELDS) -> dict[str, str]:
    """The form's `fields` (the login's `key` and `next`; empty when absent), read no further than `limit` bytes."""
    media = (request.headers.get("content-type") or "").partition(";")[0].strip().lower()
    if media != FORM:
        raise Refused(415, f"send the form as {FORM} (got {media[:60] or 'no Content-Type'})",
                      {"connection": "close"})
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"the form is {int(declared):,} bytes; a console form is at most {limit:,} "
                           "(console.max_login_bytes)", {"connection": "close"})
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:  # stop reading: the rest stays on the connection, which is closed
            raise Refused(413, f"the form passed {limit:,} bytes; a console form is at most {limit:,} "
                               "(console.max_login_bytes)", {"connection": "close"})
    most = max(1, len(fields)) * 8
    try:
        form = parse_qs(raw.decode("utf-8", "replace"), max_num_fields=most)
    except ValueError:  # more fields than the form has, many times over
        raise Refused(400, f"the form has more than {most} fields; send only {', '.join(fields) or 'none'}") from None
    return {f: (form.get(f) or [""])[0] for f in fields}


class LoginThrottle:
    """Failed console logins in the last minute, per client address and in all. An attempt counts as failed from
    when it is admitted until it succeeds, so concurrent attempts cannot all slip in while their bodies arrive."""

    def __init__(self, per_address: int, total: int, window_s: float = WINDOW_S) -> None:
        self.per_address, self.total, self.window_s = per_address, total, window_s
        self.all: deque[float] = deque(maxlen=total)
        self.by_address: dict[str, deque[float]] = {}

    def _recent(self, times: deque[float], now: float) -> deque[float]:
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return times

    def admit(self, address: str, now: float) -> float:
        """0.0 and the attempt counted, when `address` may try a key now; else the seconds until it may (until its
        oldest counted failure, or the oldest of all, leaves the minute)."""
        mine = self._recent(self.by_address.get(address, deque()), now)
        waits = [times[0] + self.window_s - now for times, allowed in ((mine, self.per_address),
                                                                        (self._recent(self.all, now), self.total))
                 if len(times) >= allowed]
        if waits:
            return max(waits)
        self.all.append(now)
        self.by_address.setdefault(address, deque(maxlen=self.per_address)).append(now)
        if len(self.by_address) > self.total:  # forget addresses whose failures aged out
            self.by_address = {a: t for a, t in self.by_address.items() if self._recent(t, now)}
        return 0.0

    def succeeded(self, address: str, admitted_at: float) -> None:
        """The attempt admitted at `admitted_at` gave an admin key: it and the address's failures stop counting."""
        self.by_address.pop(address, None)
        if admitted_at in self.all:
            self.all.remove(admitted_at)


def retry_after(wait_s: float) -> str:
    return str(max(1, math.ceil(wait_s)))
