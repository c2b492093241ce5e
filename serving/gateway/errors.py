"""The gateway's last line: an unexpected exception answers 500 cleanly; every log record is one JSON line.

    app.add_middleware(CatchAll, metrics=metrics, log=log)    # inside create_app
    configure_json_logging("info")                            # switchcraft serve: root, uvicorn and httpx as JSON lines

Starlette's own handler for `Exception` answers and then re-raises, so the
server drops the connection without `Connection: close` (a client reusing it
gets ECONNRESET) and the request is never counted. `CatchAll` catches instead:
a JSON 500 naming the exception type (never its text: it may quote the
request), `connection: close`, `switchcraft_requests_total{status="500"}`, and
one JSON log line with the traceback (frames and type, not the exception's
text) as a field.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
import uuid
from typing import Any

ENDPOINTS = {"/v1/route": "route", "/v1/chat/completions": "chat"}


class CatchAll:
    """ASGI middleware: an exception no handler caught is a 500 with `connection: close`, counted and logged."""

    def __init__(self, app, metrics, log: logging.Logger) -> None:
        self.app, self.metrics, self.log = app, metrics, log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, t0 = False, time.perf_counter()

        async def tracking(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:  # noqa: BLE001 - the point of this class
            path = scope.get("path", "")
            rid = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode(errors="replace") or uuid.uuid4().hex
            self.metrics.requests.labels(endpoint=ENDPOINTS.get(path, path), status="500").inc()
            self.log.error(json.dumps({
                "event": "unhandled", "path": path, "request_id": rid, "status": 500, "error": type(exc).__name__,
                "response_started": started, "ms": round((time.perf_counter() - t0) * 1e3, 2),
                # Frames and the type only: an exception's text may quote the request (message text, keys).
                "traceback": "".join(traceback.format_tb(exc.__traceback__)) + type(exc).__name__}))
            if started:  # bytes already went out: nothing to answer with; the server closes the connection
                return
            body = json.dumps({"error": {"message": f"internal error ({type(exc).__name__}); the gateway logged it "
                                                    f"under request_id {rid}", "type": "server_error", "param": None,
                                         "code": 500}}).encode()
            await send({"type": "http.response.start", "status": 500, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"), (b"x-request-id", rid.encode())]})
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
