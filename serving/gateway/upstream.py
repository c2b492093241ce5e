"""Forwarding to the pool's upstream endpoints, falling back down the policy's ranking on failure.

    upstreams = Upstreams(pool, metrics, timeout_s=None, max_connections=64)
    result = await upstreams.attempt(model, payload, attempts)        # one try: a result, or None to move on
    result = await upstreams.call(body_for, ["gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06-FC"], max_attempts=3)
    result.body, result.model, result.attempts                         # a stream: result.response, headers read

`body_for(model)` is that model's payload (serving/gateway/answers.py builds it
per prompt style); a payload with `stream: true` is sent as a stream. One
`httpx.AsyncClient` (a connection pool) serves every upstream. A failure
that another model may not share (connection refused or dropped, timeout, 429,
5xx, an upstream that refuses our key or does not know the model) moves to the
next model; an error in the request itself (400, 413, 422) goes back to the
caller, since every model would refuse it. Every attempt is recorded and
returned, so a fallback never hides what happened.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from data.pool import Pool
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.requests import GatewayError

CALLER_ERRORS = {400, 413, 422}


@dataclass
class Attempt:
    model: str
    outcome: str  # ok | http_<status> | timeout | connect_error | dropped | bad_body
    status: int | None
    latency_ms: float


@dataclass
class UpstreamResult:
    model: str
    attempts: list[Attempt]
    body: dict[str, Any] | None = None
    response: httpx.Response | None = None  # streaming: open, body unread
    extra: dict[str, Any] = field(default_factory=dict)

    def attempts_json(self) -> list[dict]:
        return [asdict(a) for a in self.attempts]


class Upstreams:
    def __init__(self, pool: Pool, metrics: GatewayMetrics, *, timeout_s: float | None = None,
                 max_connections: int = 64) -> None:
        self.pool, self.metrics, self.timeout_s = pool, metrics, timeout_s
        self.http = httpx.AsyncClient(limits=httpx.Limits(max_connections=max_connections,
                                                          max_keepalive_connections=max_connections))

    async def aclose(self) -> None:
        await self.http.aclose()

    def _request(self, model: str, payload: dict[str, Any]) -> httpx.Request:
        m = self.pool.get(model)
        headers = {"content-type": "application/json"}
        key = os.environ.get(m.api_key_env) if m.api_key_env else None
        if key:
            headers["authorization"] = f"Bearer {key}"
        timeout = self.timeout_s or m.timeout_s
        return self.http.build_request("POST", m.base_url.rstrip("/") + "/chat/completions", json=payload,
                                       headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)))

    def _failed(self, attempts: list[Attempt], model: str, outcome: str, status: int | None, t0: float) -> None:
        attempts.append(Attempt(model, outcome, status, (time.perf_counter() - t0) * 1e3))
        self.metrics.upstream_errors.labels(model=model, reason=outcome).inc()

    async def attempt(self, model: str, payload: dict, attempts: list[Attempt]) -> UpstreamResult | None:
        """One try, recorded in `attempts`; None when the next model should be tried, GatewayError for a caller error."""
        t0 = time.perf_counter()
        stream = payload.get("stream") is True
        try:
            response = await self.http.send(self._request(model, payload), stream=stream)
        except httpx.TimeoutException:
            return self._failed(attempts, model, "timeout", None, t0)
        except httpx.ConnectError:
            return self._failed(attempts, model, "connect_error", None, t0)
        except httpx.TransportError:
            return self._failed(attempts, model, "dropped", None, t0)
        status = response.status_code
        if status != 200:
            text = (await response.aread()).decode(errors="replace")[:2000]
            await response.aclose()
            if status in CALLER_ERRORS:
                attempts.append(Attempt(model, f"http_{status}", status, (time.perf_counter() - t0) * 1e3))
                raise GatewayError(status, f"upstream {model} rejected the request: {_upstream_message(text)}",
                                   type="upstream_rejected")
            return self._failed(attempts, model, f"http_{status}", status, t0)
        if stream and "text/event-stream" in response.headers.get("content-type", ""):
            self.metrics.upstream_latency.labels(model=model).observe(time.perf_counter() - t0)
            attempts.append(Attempt(model, "ok", 200, (time.perf_counter() - t0) * 1e3))
            return UpstreamResult(model, attempts, response=response)
        try:  # a JSON answer (also an upstream that ignores stream=true: the caller converts it)
            data = json.loads(await response.aread())
            valid = isinstance(data, dict) and isinstance(data.get("choices"), list)
        except (ValueError, httpx.TransportError):
            valid = False
        if not valid:
            await response.aclose()
            return self._failed(attempts, model, "bad_body", 200, t0)
        self.metrics.upstream_latency.labels(model=model).observe(time.perf_counter() - t0)
        attempts.append(Attempt(model, "ok", 200, (time.perf_counter() - t0) * 1e3))
        return UpstreamResult(model, attempts, body=data)

    async def call(self, body_for: Callable[[str], dict[str, Any]], candidates: list[str],
                   max_attempts: int) -> UpstreamResult:
        """The first model in `candidates` that answers; GatewayError(502) listing every attempt if none does."""
        attempts: list[Attempt] = []
        for i, model in enumerate(candidates[:max_attempts]):
            result = await self.attempt(model, body_for(model), attempts)
            if result is not None:
                return result
            if i + 1 < min(max_attempts, len(candidates)):
                self.metrics.fallbacks.labels(from_model=model, reason=attempts[-1].outcome).inc()
        raise no_answer(attempts)


def no_answer(attempts: list[Attempt]) -> GatewayError:
    """The 502 when no upstream answered, listing every attempt."""
    tried = "; ".join(f"{a.model}: {a.outcome}" for a in attempts)
    err = GatewayError(502, f"no upstream answered ({tried})", type="upstream_error")
    err.attempts = [asdict(a) for a in attempts]  # type: ignore[attr-defined]
    return err


def _upstream_message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])[:500]
    except (ValueError, KeyError, TypeError):
        return text[:500] or "(empty body)"
