"""The gateway's errors: what a caller is told (`GatewayError`, an OpenAI-style error body), and its last line:
an unexpected exception answers 500 cleanly; every log record is one JSON line. A client that vanishes mid-body
is a 499, one whose body is too slow a 408 (`CatchAll`).

    raise GatewayError(422, "switchcraft.strategy calls models the constraints exclude: …", param="switchcraft")
    return error_response(e, request_id, meta)               # the JSON answer: body, status, headers, x-request-id
    app.add_middleware(CatchAll, metrics=metrics, log=log)    # in create_app
    configure_json_logging("info")                            # switchcraft serve: root, uvicorn and httpx as JSON lines

Starlette's own handler for `Exception` answers and then re-raises, so the
server drops the connection without `Connection: close` (a client reusing it
gets ECONNRESET) and the request is never counted. `CatchAll` catches instead:
a JSON 500 naming the exception type (never its text: it may quote the
request), `connection: close`, `switchcraft_requests_total{status="500"}`, and
one JSON log line with the traceback (frames and type, not the exception's
text) as a field. Every response it lets out carries `x-content-type-options: nosniff`
(`NOSNIFF`): a browser never reads an error's JSON, which may echo a caller's text, as HTML.
"""

from __future__ import annotations

import json
import logging
import math
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

NOSNIFF = (b"x-content-type-options", b"nosniff")
ROUTE_ENDPOINTS = {"/v1/route": "route"}  # the decision-only endpoint; the wire APIs' come from their registry


@dataclass
class GatewayError(Exception):
    """An error the caller made (or an upstream failure), as an OpenAI-style error body."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    headers: dict[str, str] | None = None  # e.g. Retry-After on a 429 or 503, WWW-Authenticate on a 401
    reason: str | None = None  # why a key was refused (401/403/429): the `reason` label of auth rejections
    attempts: list[dict] | None = None  # every upstream attempt when no upstream answered: in the error body

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


def error_response(e: GatewayError, rid: str, extra: dict | None = None, shape=GatewayError.body) -> JSONResponse:
    """The error's JSON answer: its body (with the upstream attempts, and `switchcraft`: the trace so far).
    `shape(e)`: the error object of the caller's API (OpenAI's unless translated, serving/gateway/apis/)."""
    body = shape(e)
    if e.attempts:
        body["error"]["attempts"] = e.attempts
    if extra:
        body["switchcraft"] = extra
    return JSONResponse(body, status_code=e.status, headers={**(e.headers or {}), "x-request-id": rid,
                                                             NOSNIFF[0].decode(): NOSNIFF[1].decode()})


def bad(message: str, param: str | None = None) -> GatewayError:
    """A 400 naming the field."""
    return GatewayError(400, f"{param}: {message}" if param else message, param=param)


def retry_after_ms(wait_s: float) -> int:
    return max(1, math.ceil(wait_s * 1e3))


def retry_after_headers(ms: int) -> dict[str, str]:
    """Retry-After (whole seconds, rounded up) and retry-after-ms, for every 429 and 503 the gateway answers."""
    return {"retry-after": str(math.ceil(ms / 1e3)), "retry-after-ms": str(ms)}


def route_errors(shapes: dict, endpoints: dict[str, str] | None = None):
    """The handler of Starlette's own 404 and 405 (`app.add_exception_handler(HTTPException, …)`): the error object
    of the API whose path this nearly is (`/v1/messages/` answers Anthropic's shape), not Starlette's
    `{"detail": …}`; a trailing slash is named as the likely mistake."""

    async def handle(request, exc) -> JSONResponse:
        path = request.url.path
        shape = shapes.get(path.rstrip("/"), GatewayError.body)
        if exc.status_code == 404:
            hint = f"; without the trailing slash: {path.rstrip('/')}" if path.rstrip("/") in (endpoints or shapes) else ""
            e = GatewayError(404, f"no such endpoint: {request.method} {path}{hint}", type="not_found_error")
        elif exc.status_code == 405:
            e = GatewayError(405, f"{path} does not take {request.method}", type="invalid_request_error",
                             headers=dict(exc.headers or {}))
        else:
            e = GatewayError(exc.status_code, str(exc.detail), type="invalid_request_error")
        return error_response(e, _request_id(request.scope), shape=shape)

    return handle


class BodyTimeout(Exception):
    """The request body did not arrive within `body_timeout_s` of the request's headers."""


class CatchAll:
    """ASGI middleware: an exception no handler caught is a 500 with `connection: close`, counted and logged.

    Two client failures are not the gateway's and are told apart: a client that disconnects while sending its body
    (Starlette's `ClientDisconnect`) is counted as status 499 and in `switchcraft_client_disconnects_total`, logged
    at INFO, never answered; a body still incomplete `body_timeout_s` after the app began reading it (right after
    the key check; a slow-loris body) is a 408 with `connection: close`, counted in
    `switchcraft_client_timeouts_total{phase="body"}`."""

    def __init__(self, app, metrics, log: logging.Logger, body_timeout_s: float | None = 30.0,
                 shapes: dict | None = None, endpoints: dict[str, str] | None = None) -> None:
        self.app, self.metrics, self.log, self.body_timeout_s = app, metrics, log, body_timeout_s
        self.endpoints = endpoints or dict(ROUTE_ENDPOINTS)  # path -> its `endpoint` metric label
        self.shapes = shapes or {}  # path -> the error object of the API spoken there (OpenAI's by default)

    def _error(self, path: str, status: int, message: str, type_: str, param: str | None) -> dict[str, Any]:
        return self.shapes.get(path, GatewayError.body)(GatewayError(status, message, type=type_, param=param))

    def _deadline(self, receive):
        """`receive` bounded: the whole body must arrive within body_timeout_s of the app's first read."""
        if self.body_timeout_s is None:
            return receive
        deadline, body_done = None, False

        async def timed() -> dict[str, Any]:
            nonlocal body_done, deadline
            if body_done:  # after the body: e.g. a streaming response listening for the disconnect
                return await receive()
            if deadline is None:
                deadline = time.monotonic() + self.body_timeout_s
            try:
                with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(f"request body not received within {self.body_timeout_s:g} s") from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        return timed

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, t0 = False, time.perf_counter()

        async def tracking(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers") or [])
                if not any(k.lower() == NOSNIFF[0] for k, _ in headers):
                    message = {**message, "headers": [*headers, NOSNIFF]}
            await send(message)

        try:
            await self.app(scope, self._deadline(receive), tracking)
        except ClientDisconnect:  # the client went away mid-body: nobody to answer, nothing of ours failed
            path = scope.get("path", "")
            endpoint = self.endpoints.get(path, path)
            self.metrics.requests.labels(endpoint=endpoint, status="499").inc()
            self.metrics.client_disconnects.labels(endpoint=endpoint).inc()
            self.log.info(json.dumps({"event": "client_disconnect", "path": path, "status": 499,
                                      "request_id": _request_id(scope),
                                      "ms": round((time.perf_counter() - t0) * 1e3, 2)}))
        except BodyTimeout as exc:
            path = scope.get("path", "")
            rid = _request_id(scope)
            self.metrics.requests.labels(endpoint=self.endpoints.get(path, path), status="408").inc()
            self.metrics.client_timeouts.labels(phase="body").inc()
            self.log.info(json.dumps({"event": "client_timeout", "phase": "body", "path": path, "status": 408,
                                      "request_id": rid, "ms": round((time.perf_counter() - t0) * 1e3, 2)}))
            if not started:
                await _send_json(send, 408, self._error(path, 408, f"{exc}; send it faster or retry", "request_timeout",
                                                        "body"), rid)
        except Exception as exc:  # noqa: BLE001 - the point of this class
            path = scope.get("path", "")
            rid = _request_id(scope)
            self.metrics.requests.labels(endpoint=self.endpoints.get(path, path), status="500").inc()
            self.log.error(json.dumps({
                "event": "unhandled", "path": path, "request_id": rid, "status": 500, "error": type(exc).__name__,
                "response_started": started, "ms": round((time.perf_counter() - t0) * 1e3, 2),
                # Frames and the type only: an exception's text may quote the request (message text, keys).
                "traceback": "".join(traceback.format_tb(exc.__traceback__)) + type(exc).__name__}))
            if started:  # bytes already went out: nothing to answer with; the server closes the connection
                return
            await _send_json(send, 500, self._error(path, 500, f"internal error ({type(exc).__name__}); the gateway "
                                                               f"logged it under request_id {rid}", "server_error", None),
                             rid)


def _request_id(scope) -> str:
    """The id the request path gave this request (admit.request_id), else a fresh one: never the caller's."""
    rid = (scope.get("state") or {}).get("request_id")
    return rid if isinstance(rid, str) else uuid.uuid4().hex


async def _send_json(send, status: int, payload: dict, rid: str) -> None:
    """A JSON answer that closes the connection (the client's next request opens a fresh one)."""
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"), (b"x-request-id", rid.encode()), NOSNIFF]})
    await send({"type": "http.response.body", "body": body})


class JsonLines(logging.Formatter):
    """One JSON object per record: a record whose message is a JSON object is merged in; tracebacks are a field."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        try:
            parsed = json.loads(message) if message.startswith("{") else None
        except ValueError:
            parsed = None
        out: dict[str, Any] = {"t": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name}
        out.update(parsed if isinstance(parsed, dict) else {"message": message})
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_json_logging(level: str) -> logging.Handler:
    """Every logger through one JSON-lines handler on stderr; httpx's per-request lines off (they name upstream URLs
    and nothing our own request log lacks). Run uvicorn with `log_config=None` so it keeps this."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers, lg.propagate = [], True
    return handler
