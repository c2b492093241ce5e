"""Serving the gateway app with uvicorn, with a deadline on request headers (slow-loris clients).

    config = uvicorn_config(app, cfg)            # switchcraft serve; the tests run the same config on loopback
    uvicorn.Server(config).run()
    Multiprocess(uvicorn_config("serving.app:worker_app", cfg), sockets=[sock]).run()   # cfg.workers > 1

uvicorn times out only idle keep-alive connections: a client that connects and
sends nothing, or sends its headers a byte at a time, holds its connection (and
its file descriptor and buffers) for as long as it likes. `DeadlineH11Protocol`
is uvicorn's own h11 protocol with one timer: armed when a connection opens and
when the first byte of a further request on it arrives, disarmed when h11 has
read a request's headers. When it fires the client gets `408 Request Timeout`
with `connection: close` and the connection is closed;
`switchcraft_client_timeouts_total{phase="headers"}` counts it. The body has
its own deadline inside the app (`CatchAll`, `body_timeout_s`: a JSON 408),
so it holds under any ASGI server.
"""

from __future__ import annotations

import asyncio
import json
import logging

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("switchcraft.gateway")
TIMEOUT_BODY = json.dumps({"error": {"message": "request headers not received in time", "type": "request_timeout",
                                     "param": None, "code": 408}}).encode()
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    b"content-length: " + str(len(TIMEOUT_BODY)).encode() + b"\r\n\r\n" + TIMEOUT_BODY)


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol; a request's headers must be complete within `header_timeout_s`."""

    header_timeout_s: float = 10.0
    metrics = None  # GatewayMetrics: client_timeouts{phase="headers"}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()  # a connection that never sends a byte is a slow header too

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        if self._between_requests():  # the next request's headers start arriving (uvicorn's keep-alive timer stops)
            self._arm()
        super().data_received(data)

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not before:  # h11 read a request's headers: the app has it now
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._between_requests():
            return
        self.transport.write(TIMEOUT_RESPONSE)
        self.transport.close()
        if self.metrics is not None:
            self.metrics.client_timeouts.labels(phase="headers").inc()
        log.info(json.dumps({"event": "client_timeout", "phase": "headers", "status": 408,
                             "client": f"{self.client[0]}:{self.client[1]}" if self.client else None}))


def protocol_for(header_timeout_s: float, metrics=None) -> type[DeadlineH11Protocol]:
    """The protocol class uvicorn instantiates per connection, with this gateway's deadline and metrics."""
    return type("GatewayH11Protocol", (DeadlineH11Protocol,), {"header_timeout_s": header_timeout_s, "metrics": metrics})


class WorkerH11Protocol(DeadlineH11Protocol):
    """The protocol of each worker of `switchcraft serve --workers N`: uvicorn hands its config to the worker
    processes by pickling it, so the class is one importable by name, not made per config; the worker's app factory
    sets its deadline and metrics (`for_worker`)."""

    @classmethod
    def for_worker(cls, header_timeout_s: float, metrics) -> None:
        cls.header_timeout_s, cls.metrics = header_timeout_s, metrics


def uvicorn_config(app, cfg, **overrides) -> uvicorn.Config:
    """The uvicorn config `switchcraft serve` runs: cfg.host/port, the header deadline, JSON logging kept. With
    `cfg.workers` above 1, `app` is the import string of an app factory that each worker process calls (uvicorn's
    own multi-process supervisor runs them). `cfg`: the chat gateway's config or the MCP gateway's (one process)."""
    kwargs = {"host": cfg.host, "port": cfg.port, "log_level": "warning", "access_log": False, "log_config": None}
    workers = getattr(cfg, "workers", 1)
    if workers > 1:
        kwargs.update(http=WorkerH11Protocol, factory=True, workers=workers)
    else:
        kwargs["http"] = protocol_for(cfg.header_timeout_s, getattr(app.state, "metrics", None))
    return uvicorn.Config(app, **{**kwargs, **overrides})
