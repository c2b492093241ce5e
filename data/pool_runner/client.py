"""One call of a model over HTTP in its provider's API, with retries that respect the server.

Retried: 429, 408, 409 and 5xx responses, timeouts, dropped connections and
unreadable 200 bodies. Waits honour `retry-after-ms` / `Retry-After`
(seconds or an HTTP date) when the server sends one, and otherwise back off
exponentially with jitter. Every attempt carries the same Idempotency-Key, so
a server that honours it never charges twice for a retried call.

API keys: the key goes into the API's key header (`Authorization: Bearer`, or
`x-api-key` for Anthropic Messages) and nowhere else; every
message this module produces (including server error bodies, which some
providers fill with the key they were given) passes through `redact`.

    python -m pytest -q tests/integration/test_pool_faults.py
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from data import wire
from data.pool_runner.limits import RequestPacer
from data.wire.raw import WireError
from data.schema import Usage

RETRY_STATUS = {408, 409, 429}


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 6
    base_s: float = 0.5  # first backoff; doubles each attempt
    max_backoff_s: float = 30.0
    max_wait_s: float = 120.0  # longest Retry-After we will sleep through

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Equal jitter: half the exponential step fixed, half random, so waits spread but never vanish."""
        step = min(self.max_backoff_s, self.base_s * 2**attempt)
        return step / 2 + rng.uniform(0, step / 2)


@dataclass
class CallResult:
    raw: Any
    usage: Usage
    latency_s: float
    attempts: int


class CallFailed(Exception):
    """A call that did not produce an answer; `message` is already redacted."""

    def __init__(self, message: str, *, status: int | None, attempts: int, retryable: bool) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.retryable = retryable


def redact(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text


def retry_after_s(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait, or None. OpenAI sends retry-after-ms too."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, when.timestamp() - time.time()) if when else None


def _error_text(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        text = str(msg) if msg else resp.text
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        text = resp.text
    return f"HTTP {resp.status_code}: {text[:300]}"


async def post_completion(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    api_key: str | None,
    idempotency_key: str,
    timeout_s: float,
    policy: RetryPolicy,
    pacer: RequestPacer,
    rng: random.Random,
    api: str = "openai_chat",
) -> CallResult:
    """POST `body` (a request of `api`) to `url` until it answers, or raise CallFailed."""
    payload = json.dumps(body).encode()
    headers = {"content-type": "application/json", "idempotency-key": idempotency_key,
               **wire.auth_headers(api, api_key)}
    secrets = [api_key] if api_key else []
    last = "no attempt made"
    status: int | None = None
    for attempt in range(policy.max_retries + 1):
        await pacer.wait()
        t0 = time.monotonic()
        wait: float | None = None
        try:
            resp = await client.post(url, content=payload, headers=headers, timeout=timeout_s)
        except httpx.TimeoutException:
            last, status = f"timed out after {timeout_s:g} s", None
        except httpx.TransportError as e:  # refused, reset, closed mid-body
            last, status = f"connection error: {type(e).__name__}: {e}", None
        else:
            status = resp.status_code
            if status == 200:
                try:
                    raw, usage, _ = wire.parse_answer(api, resp.content)
                    return CallResult(raw, usage, time.monotonic() - t0, attempt + 1)
                except WireError as e:
                    last = f"unreadable response: {e}"
            elif status in RETRY_STATUS or status >= 500:
                last = _error_text(resp)
                wait = retry_after_s(resp.headers)
            else:  # 400, 401, 403, 404, 422: asking again will not help
                raise CallFailed(
                    redact(_error_text(resp), secrets),
                    status=status,
                    attempts=attempt + 1,
                    retryable=False,
                )
        if attempt == policy.max_retries:
            break
        delay = min(wait, policy.max_wait_s) if wait is not None else policy.backoff(attempt, rng)
        await asyncio.sleep(delay)
    raise CallFailed(
        redact(f"gave up after {policy.max_retries + 1} attempts; last: {last}", secrets),
        status=status,
        attempts=policy.max_retries + 1,
        retryable=True,
    )
