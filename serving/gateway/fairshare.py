"""Each API key's fair share of the upstream connections: one key's slow requests never starve the others.

    shares = KeyShares(max_connections=64, share=0.5, wait_s=5.0)
    with caller_key("acme"):                    # chat.serve: the key whose request this is
        async with shares.slot():               # upstream.py: around each upstream call
            ...

Every upstream call holds one slot of its API key while it runs (a stream:
until it is closed). A key holds at most `upstream.key_share` ×
`upstream.max_connections` slots (at least one); a call beyond that waits for
one of its own key's calls to end, `upstream.key_wait_s` at most, and is then
refused with 429 `key_upstream_busy`, Retry-After and retry-after-ms. Other
keys' calls never wait for it: with a share of one half, a key can hold at most
half the pool, and the other half stays free for everyone else. Calls a request
starts in the background (exploration) count against its key; requests without
a key id (`auth.mode: none`) share one bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from contextvars import ContextVar

from serving.core.errors import GatewayError, retry_after_headers, retry_after_ms

CALLER: ContextVar[str | None] = ContextVar("switchcraft_caller_key", default=None)


@contextlib.contextmanager
def caller_key(key_id: str | None):
    """The key id the upstream calls made inside (tasks started inside included) are counted against."""
    token = CALLER.set(key_id)
    try:
        yield
    finally:
        CALLER.reset(token)


class KeyShares:
    def __init__(self, *, max_connections: int, share: float, wait_s: float) -> None:
        self.cap = max(1, math.floor(max_connections * share))
        self.wait_s = wait_s
        self.held: dict[str | None, int] = {}
        self.freed: dict[str | None, asyncio.Event] = {}

    async def acquire(self, key: str | None = None) -> str | None:
        """A slot of `key` (default: the caller's); GatewayError 429 when none freed up within `wait_s`."""
        key = CALLER.get() if key is None else key
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while self.held.get(key, 0) >= self.cap:
            event = self.freed.setdefault(key, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), timeout=max(0.0, deadline - loop.time()))
            except TimeoutError:
                ms = retry_after_ms(max(1.0, self.wait_s))
                raise GatewayError(429, f"this API key already has {self.cap} upstream calls in flight (its share, "
                                   f"upstream.key_share of upstream.max_connections) and none ended within "
                                   f"{self.wait_s:g} s; retry after {ms} ms or send fewer requests at once",
                                   type="key_upstream_busy", headers=retry_after_headers(ms),
                                   reason="key_upstream_busy") from None
        self.held[key] = self.held.get(key, 0) + 1
        return key

    def release(self, key: str | None) -> None:
        n = self.held.get(key, 0) - 1
        if n > 0:
            self.held[key] = n
        else:
            self.held.pop(key, None)
        event = self.freed.pop(key, None)
        if event is not None:  # every waiter of the key looks again; those still over the cap wait on a new event
            event.set()

    @contextlib.asynccontextmanager
    async def slot(self):
        key = await self.acquire()
        try:
            yield key
        finally:
            self.release(key)

    def hold_until_closed(self, key: str | None, stream) -> None:
        """`stream`'s slot is released when it is closed (once), not when the call returned it."""
        close, done = stream.aclose, False

        async def aclose() -> None:
            nonlocal done
            try:
                await close()
            finally:
                if not done:
                    done = True
                    self.release(key)

        stream.aclose = aclose
