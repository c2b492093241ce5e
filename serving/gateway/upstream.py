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
returned, so a fallback never hides what happened. A circuit breaker per
endpoint (serving/gateway/breaker.py) keeps calls off a dead endpoint, and an
endpoint that refused a connection is skipped for the rest of that request;
when nothing was reachable the answer is a 503 with Retry-After (seconds) and
retry-after-ms. Each API key's calls hold at most its share of the connections
(serving/gateway/fairshare.py, `upstream.key_share`). A call that timed out or dropped after it was sent is
*abandoned*: counted with its estimated cost, since the provider may bill it.

An upstream 429 is obeyed per endpoint: its `retry-after-ms` or `Retry-After`
(seconds or an HTTP date) is learnt by the endpoint's breaker, and until then
the endpoint's models are skipped (`rate_limited`, not sent) by every request,
so a cascade never fans out over a provider that asked for a pause. When every
candidate was rate-limited the answer is a 429 `upstream_rate_limited` with the
soonest Retry-After, not a 502.

Each model is asked in the API its provider speaks (its pool entry's `api`, a
wire API of data/wire/registry.py: openai_chat, anthropic_messages,
openai_responses, …): the chat payload is sent as that API's request and its
answer decoded back into a chat completion, usage and cache counts included
(the pool runner's translators); a stream of an API with its own events is
read as chat chunks (`NativeStream`), so everything after the upstream sees
one shape. A `Native` payload (serving/gateway/passthrough.py) is the caller's own body in the provider's API:
it is sent as it is, with the caller's headers of that API, and its answer kept as the provider sent it
(`extra["native_body"]`, the JSON; `extra["native_stream"]`, the open stream unread) beside the decoded
chat completion.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import httpx

from data.pool import Pool
from data import wire
from data.pool_runner.request import with_output_cap
from data.wire.raw import WireError
from serving.gateway.breaker import Breakers
from serving.gateway.config import BreakerSettings
from serving.gateway.fairshare import KeyShares
from serving.gateway.overhead import waiting
from serving.core.budget import ABANDONED
from serving.core.metrics import GatewayMetrics
from serving.core.errors import GatewayError, retry_after_headers, retry_after_ms

CALLER_ERRORS = {400, 413, 422}
# Not sent: the endpoint's breaker is open, it refused us this request, or it asked for a pause (429 Retry-After).
# Or the request's hold could not be extended to pay for it (budget_refused: serving/core/budget.py Hold).
SKIPPED = {"circuit_open", "endpoint_down", "rate_limited", "budget_refused"}
UNREACHABLE = SKIPPED | {"connect_error", "http_429"}
RATE_LIMITED = {"rate_limited", "http_429"}


class Gate(Protocol):
    """What a call must pass before it is sent: the request's money (serving/core/budget.py `Hold`)."""

    refused: GatewayError | None  # the last refusal: what the caller is told when no answer came

    async def cover(self, model: str) -> bool: ...

    def spare(self, model: str) -> None: ...  # its call failed before anything could be billed


# The gate of the request whose calls run in this context (set around a strategy's run by serving/gateway/chat.py;
# tasks the run starts inherit it). None: calls go out ungated (exploration holds its whole worst case up front).
GATE: ContextVar[Gate | None] = ContextVar("switchcraft_gate", default=None)


@dataclass
class Attempt:
    model: str
    outcome: str  # ok | http_<status> | timeout | connect_error | dropped | bad_body | circuit_open | endpoint_down | hedge_lost
    status: int | None
    latency_ms: float
    estimated_cost_usd: float | None = None  # abandoned calls: what the router expected this call to cost
    retry_after_s: float | None = None  # a 429: how long the provider asked us to wait (as the breaker keeps it)

    @property
    def sent(self) -> bool:
        return self.outcome not in SKIPPED


class Native(dict):
    """A body the provider's API takes as it is (a caller of that same API, passed through): sent as compact
    JSON, unchanged, with `headers` (the caller's `anthropic-beta`, … of that API) after the key's."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body)
        self.headers = dict(headers or {})


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
                 max_connections: int = 64, breaker: BreakerSettings | None = None, key_share: float = 0.5,
                 key_wait_s: float = 5.0, default_output_tokens: int = 4096) -> None:
        self.pool, self.metrics, self.timeout_s = pool, metrics, timeout_s
        self.shares = KeyShares(max_connections=max_connections, share=key_share, wait_s=key_wait_s)
        self.default_output_tokens = default_output_tokens  # the cap sent when neither caller nor pool gives one
        self.breakers = Breakers(pool, breaker or BreakerSettings(), metrics)
        self.http = httpx.AsyncClient(limits=httpx.Limits(max_connections=max_connections,
                                                          max_keepalive_connections=max_connections))

    async def aclose(self) -> None:
        await self.http.aclose()

    def _request(self, model: str, payload: dict[str, Any]) -> httpx.Request:
        m = self.pool.get(model)
        headers = {"content-type": "application/json", **wire.auth_headers(m.api, self._key(model))}
        timeout = self.timeout_s or m.timeout_s
        if isinstance(payload, Native):  # the caller's own body: its cap is already the one reserved
            content = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
            return self.http.build_request("POST", wire.url(m.base_url, m.api), content=content,
                                           headers={**headers, **payload.headers},
                                           timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)))
        return self.http.build_request("POST", wire.url(m.base_url, m.api), json=wire.native_request(
            m.api, with_output_cap(payload, m, self.default_output_tokens)),
                                       headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)))

    def _key(self, model: str) -> str | None:
        m = self.pool.get(model)
        return os.environ.get(m.api_key_env) if m.api_key_env else None

    def _failed(self, attempts: list[Attempt], model: str, outcome: str, status: int | None, t0: float,
                estimate: float | None = None) -> None:
        abandoned = outcome in ABANDONED
        attempts.append(Attempt(model, outcome, status, (time.perf_counter() - t0) * 1e3,
                                estimate if abandoned else None))
        self.metrics.upstream_errors.labels(model=model, reason=outcome).inc()
        if abandoned:
            self.abandoned(model, outcome, estimate)

    def abandoned(self, model: str, reason: str, estimate: float | None) -> None:
        self.metrics.abandoned.labels(model=model, reason=reason).inc()
        if estimate is not None:
            self.metrics.abandoned_cost.labels(model=model).inc(estimate)

    def skip(self, model: str, attempts: list[Attempt], down: set[str] | None) -> bool:
        """True (and the skip recorded) when `model`'s endpoint is not to be called now."""
        breaker = self.breakers.of(model)
        if down is not None and breaker.endpoint in down:
            outcome = "endpoint_down"
        elif breaker.limited_s() > 0:
            outcome = "rate_limited"
        elif not breaker.allow():
            outcome = "circuit_open"
        else:
            return False
        attempts.append(Attempt(model, outcome, None, 0.0))
        self.metrics.circuit_skips.labels(endpoint=breaker.endpoint, model=model).inc()
        return True

    async def attempt(self, model: str, payload: dict, attempts: list[Attempt], *, down: set[str] | None = None,
                      estimate: float | None = None) -> UpstreamResult | None:
        """One try, recorded in `attempts`; None when the next model should be tried, GatewayError for a caller error.

        Not sent when the endpoint's breaker is open or it refused a connection earlier in this request (`down`:
        the request's set of such endpoints, updated here). `estimate`: the call's expected cost, booked as
        abandoned when it times out or drops."""
        key = await self.shares.acquire()  # the caller's key's share of the connections (serving/gateway/fairshare.py)
        if self.skip(model, attempts, down):
            self.shares.release(key)
            return None
        gate = GATE.get()
        if gate is not None and not await gate.cover(model):
            self.shares.release(key)
            attempts.append(Attempt(model, "budget_refused", None, 0.0))
            return None
        breaker, verdict, held = self.breakers.of(model), None, True
        try:
            result = await self._send(model, payload, attempts, estimate)
            if result is not None and result.response is not None:  # a stream holds its slot until it is closed
                self.shares.hold_until_closed(key, result.response)
                held = False
            outcome = attempts[-1].outcome
            status = attempts[-1].status
            if gate is not None and (outcome == "connect_error" or (status or 200) != 200):
                gate.spare(model)  # an error answer is not billed: what was held for it may pay the next call
            verdict = outcome in ("timeout", "connect_error", "dropped", "bad_body") or (status or 0) >= 500
            if outcome == "connect_error" and down is not None:
                down.add(breaker.endpoint)
            if status == 429:  # the provider is up and asks for a pause: every request respects it
                attempts[-1].retry_after_s = breaker.rate_limited(attempts[-1].retry_after_s)
                self.metrics.upstream_rate_limited.labels(endpoint=breaker.endpoint).inc()
            return result
        except GatewayError:
            verdict = False  # the endpoint answered: it is up
            raise
        finally:
            if held:
                self.shares.release(key)
            if verdict is None:
                breaker.release()  # cancelled (a hedge lost): no verdict on the endpoint
            else:
                breaker.record(failed=verdict)

    async def _send(self, model: str, payload: dict, attempts: list[Attempt],
                    estimate: float | None) -> UpstreamResult | None:
        t0 = time.perf_counter()
        stream = payload.get("stream") is True
        try:
            with waiting():  # the request's upstream time (serving/gateway/overhead.py), not the gateway's
                response = await self.http.send(self._request(model, payload), stream=stream)
        except httpx.TimeoutException:
            return self._failed(attempts, model, "timeout", None, t0, estimate)
        except httpx.ConnectError:
            return self._failed(attempts, model, "connect_error", None, t0)
        except httpx.TransportError:
            return self._failed(attempts, model, "dropped", None, t0, estimate)
        status = response.status_code
        if status != 200:
            with waiting():
                text = (await response.aread()).decode(errors="replace")[:2000]
            await response.aclose()
            if status in CALLER_ERRORS:
                attempts.append(Attempt(model, f"http_{status}", status, (time.perf_counter() - t0) * 1e3))
                raise GatewayError(status, f"upstream {model} rejected the request: "
                                   f"{_upstream_message(text, self._key(model))}", type="upstream_rejected")
            self._failed(attempts, model, f"http_{status}", status, t0)
            if status == 429:
                attempts[-1].retry_after_s = retry_after(response.headers)
            return None
        if stream and "text/event-stream" in response.headers.get("content-type", ""):
            self.metrics.upstream_latency.labels(model=model).observe(time.perf_counter() - t0)
            attempts.append(Attempt(model, "ok", 200, (time.perf_counter() - t0) * 1e3))
            api = self.pool.get(model).api  # a stream of chat chunks passes through; another API's is decoded
            if isinstance(payload, Native):
                return UpstreamResult(model, attempts, response=response, extra={"native_stream": True})
            return UpstreamResult(model, attempts, response=response if wire.get(api).stream is None
                                  else NativeStream(response, api))
        native = None
        try:  # a JSON answer (also an upstream that ignores stream=true: the caller converts it)
            with waiting():
                raw = await response.aread()
            native = json.loads(raw)
            data = wire.chat_completion(self.pool.get(model).api, native)
            valid = isinstance(data.get("choices"), list)
        except WireError:
            valid = False
        except httpx.TimeoutException:
            return self._failed(attempts, model, "timeout", 200, t0, estimate)
        except (ValueError, httpx.TransportError):
            valid = False
        if not valid:
            await response.aclose()
            return self._failed(attempts, model, "bad_body", 200, t0)
        self.metrics.upstream_latency.labels(model=model).observe(time.perf_counter() - t0)
        attempts.append(Attempt(model, "ok", 200, (time.perf_counter() - t0) * 1e3))
        return UpstreamResult(model, attempts, body=data,
                              extra={"native_body": native} if isinstance(payload, Native) else {})

    async def call(self, body_for: Callable[[str], dict[str, Any]], candidates: list[str], max_attempts: int,
                   costs: dict[str, float] | None = None) -> UpstreamResult:
        """The first model in `candidates` that answers (at most `max_attempts` calls sent; skipped endpoints do
        not count); GatewayError(502, or 503 when no endpoint was reachable) listing every attempt if none does."""
        attempts: list[Attempt] = []
        down: set[str] = set()
        sent = 0
        for model in candidates:
            if sent >= max_attempts:
                break
            if attempts:  # the previous model failed: this is a fallback
                self.metrics.fallbacks.labels(from_model=attempts[-1].model, reason=attempts[-1].outcome).inc()
            result = await self.attempt(model, body_for(model), attempts, down=down,
                                        estimate=(costs or {}).get(model))
            if result is not None:
                return result
            sent += attempts[-1].sent
        raise self.no_answer(attempts)

    def unavailable(self, models: Iterable[str]) -> GatewayError:
        """503 with Retry-After (seconds) and retry-after-ms: the earliest an endpoint of `models` takes calls."""
        models = list(models)
        wait = self.breakers.retry_after_s(models)
        ms = retry_after_ms(1.0 if wait is None else wait)
        endpoints = sorted({self.breakers.of(m).endpoint for m in models})
        return GatewayError(503, f"no upstream is reachable now (endpoints down: {', '.join(endpoints)}); "
                            f"retry after {ms} ms", type="upstream_unavailable",
                            headers=retry_after_headers(ms))

    def rate_limited(self, models: Iterable[str]) -> GatewayError:
        """429 with the soonest Retry-After among `models`' endpoints: every candidate asked for a pause."""
        models = list(models)
        wait = self.breakers.limited_s(models)
        ms = retry_after_ms(1.0 if wait is None else wait)
        endpoints = sorted({self.breakers.of(m).endpoint for m in models})
        return GatewayError(429, f"every upstream candidate is rate-limited (endpoints: {', '.join(endpoints)}); "
                            f"retry after {ms} ms", type="upstream_rate_limited",
                            headers=retry_after_headers(ms))

    def no_answer(self, attempts: list[Attempt]) -> GatewayError:
        """502 when no upstream answered; 429 with the soonest Retry-After when every candidate was rate-limited;
        503 with Retry-After when none was reachable (rate-limited ones included); the request's budget refusal
        (429) when its hold could not be extended for a call that might have answered."""
        gate = GATE.get()
        if gate is not None and gate.refused is not None and any(a.outcome == "budget_refused" for a in attempts):
            err = gate.refused
        elif attempts and all(a.outcome in RATE_LIMITED for a in attempts):
            err = self.rate_limited(a.model for a in attempts)
        elif attempts and all(a.outcome in UNREACHABLE for a in attempts):
            err = self.unavailable(a.model for a in attempts)
        else:
            err = no_answer(attempts)
        err.attempts = [asdict(a) for a in attempts]
        return err


class NativeStream:
    """An upstream's open stream in its own API's events (Messages, Responses, …), read as Chat Completions SSE
    lines (`data: {chunk}`, a blank line, … `data: [DONE]`), so the passthrough (serving/gateway/streams.py) sees
    one shape."""

    def __init__(self, response: httpx.Response, api: str) -> None:
        self.response, self.api = response, api
        self.status_code, self.headers = response.status_code, response.headers

    async def aiter_lines(self):
        decoder = wire.StreamDecoder(self.api)
        event, data = None, []
        async for line in self.response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line.strip() and data:
                try:
                    chunks = decoder.feed(event, json.loads("\n".join(data)))
                except json.JSONDecodeError:
                    chunks = []
                event, data = None, []
                for chunk in chunks:
                    yield "data: " + json.dumps(chunk, separators=(",", ":"))
                    yield ""
                if decoder.done:
                    yield "data: [DONE]"
                    yield ""
                    return

    async def aclose(self) -> None:
        await self.response.aclose()


def retry_after(headers: httpx.Headers) -> float | None:
    """A 429's wait in seconds: `retry-after-ms` (OpenAI's), else `Retry-After` (seconds or an HTTP date)."""
    try:
        ms = float(headers.get("retry-after-ms", ""))
        if math.isfinite(ms) and ms >= 0:
            return ms / 1e3
    except ValueError:
        pass
    value = headers.get("retry-after", "").strip()
    try:
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when.tzinfo is not None else None


def no_answer(attempts: list[Attempt]) -> GatewayError:
    """The 502 when no upstream answered, listing every attempt."""
    tried = "; ".join(f"{a.model}: {a.outcome}" for a in attempts)
    return GatewayError(502, f"no upstream answered ({tried})", type="upstream_error",
                        attempts=[asdict(a) for a in attempts])


def _upstream_message(text: str, key: str | None = None) -> str:
    try:
        message = str(json.loads(text)["error"]["message"])[:500]
    except (ValueError, KeyError, TypeError):
        message = text[:500] or "(empty body)"
    # Providers quote the key they got ("Incorrect API key provided: sk-…"): ours never reaches the caller.
    return message.replace(key, "[redacted]") if key else message
