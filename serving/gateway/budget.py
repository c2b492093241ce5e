"""Where a key's budget and request rate are enforced: admit, reserve the worst case, settle the real cost.

    budgets = Budgets(store, metrics, pool, cfg.state, max_attempts=3)
    await budgets.admit(ident)                                   # 429 rate_limit | budget; 503 when the store is down
    res = await budgets.reserve(ident, worst, request_id)        # before any upstream call: 429 when none is left
    await budgets.settle(ident, res, charges_of(run, ...))       # after the calls: the ledger, the day's spend

The state itself (counts, reservations, the ledger) is in serving/gateway/state.py, in SQLite or Redis.
A reservation is the strategy's worst case: every model it may call at the request's input size and
`max_tokens` (serving/gateway/budget.py `worst_case_usd`). A request is admitted while the day's
`spent + reserved` is below the key's `usd_per_day`, so a burst of concurrent requests stops at the first
reservation that reaches the limit: the day ends at most one reservation past it (docs/serving.md, "State").

Keys with limits fail closed when the store cannot be reached (503 with Retry-After, counted in
`switchcraft_state_errors_total`) or does not answer within its deadline (a SQLite file another process
holds locked). Keys without limits need no answer from the store to be served: their hold and their charge
are written beside the request (waited for at most `state.unlimited_wait_s` each), and a charge the store
cannot take is logged and retried (`state.settle_retry_s`), then counted as lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import anyio

from data.pool import Pool, PoolModel
from serving.gateway.auth import Identity, too_many
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.errors import GatewayError, retry_after_headers, retry_after_ms
from serving.gateway.state import Charge, OverBudget, Reservation, StateStore, StateUnavailable, utc_day
from training.policy import Strategy

log = logging.getLogger("switchcraft.gateway")


def limited(ident: Identity) -> bool:
    return ident.limits.requests_per_minute is not None or ident.limits.usd_per_day is not None


@dataclass(frozen=True)
class Landing(Reservation):
    """A hold of a key without limits that the store had not taken when the request went on: `task` is its
    write (the store's Reservation, or StateUnavailable). Its charge waits for that write, off the request."""

    task: asyncio.Task | None = field(default=None, compare=False, repr=False)


class Budgets:
    """Keys with limits wait for the store (bounded by its own deadline: serving/gateway/state.py) and are
    refused with 503 when it cannot answer. Keys without limits never wait for it longer than
    `unlimited_wait_s` per step (their hold, their charge): a write still running then finishes in the
    background (`writing`), and a failed charge is retried like any other (`settle_retry_s`)."""

    def __init__(self, store: StateStore, metrics: GatewayMetrics, *, retry_after_s: float = 2.0,
                 settle_retry_s: float = 600.0, unlimited_wait_s: float = 0.25, clock=time.time) -> None:
        self.store, self.metrics, self.retry_after_s, self.clock = store, metrics, retry_after_s, clock
        self.settle_retry_s, self.unlimited_wait_s = settle_retry_s, unlimited_wait_s
        self.retrying: set[asyncio.Task] = set()
        self.writing: set[asyncio.Task] = set()  # holds and charges of keys without limits, still being written

    @classmethod
    def from_settings(cls, store: StateStore, metrics: GatewayMetrics, settings) -> Budgets:
        """With the serving config's `state:` settings (serving.gateway.config.StateSettings)."""
        return cls(store, metrics, retry_after_s=settings.unavailable_retry_after_s,
                   settle_retry_s=settings.settle_retry_s, unlimited_wait_s=settings.unlimited_wait_s)

    def _unavailable(self, op: str, e: StateUnavailable) -> GatewayError:
        self.metrics.state_errors.labels(op=op).inc()
        log.error(json.dumps({"event": "state_unavailable", "op": op, "store": self.store.name, "error": str(e)}))
        return GatewayError(503, "the gateway's limit store is unavailable; this API key has limits, so it is not "
                            f"served until the store is back; retry after {self.retry_after_s:g} s",
                            type="state_unavailable",
                            headers=retry_after_headers(retry_after_ms(self.retry_after_s)))

    def _background(self, coro, into: set[asyncio.Task]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        into.add(task)
        task.add_done_callback(into.discard)
        return task

    async def admit(self, ident: Identity) -> None:
        """Count the request against the key's per-minute limit; 429 when that or today's budget is used up."""
        if not limited(ident):
            return
        lim = ident.limits
        try:
            seen = await self.store.admit(ident.key_id, rpm=lim.requests_per_minute, usd_per_day=lim.usd_per_day,
                                          now=self.clock())
        except StateUnavailable as e:
            raise self._unavailable("admit", e) from None
        if seen.reason == "budget":
            raise too_many("budget", f"API key {ident.key_id!r} has spent {seen.spent:.6f} (and holds "
                           f"{seen.reserved:.6f} for requests in flight) of its {lim.usd_per_day:g} USD for today "
                           "(UTC); it resets at 00:00 UTC", seen.wait_s)
        if seen.reason == "rate_limit":
            raise too_many("rate_limit", f"API key {ident.key_id!r} is limited to {lim.requests_per_minute} requests "
                           "per minute", seen.wait_s)

    async def reserve(self, ident: Identity, usd: float, request_id: str) -> Reservation | None:
        """Hold `usd` (the request's worst case) on the key's day; 429 when its budget is already used up.
        A key without limits: None when the store is down (its charge is then recorded when it is back), a
        `Landing` when the store has not answered within `unlimited_wait_s`."""
        if not limited(ident):
            task = asyncio.get_running_loop().create_task(
                self.store.reserve(ident.key_id, usd, limit=None, request_id=request_id, now=self.clock()))
            await asyncio.wait({task}, timeout=self.unlimited_wait_s)  # the write goes on if this times out
            if not task.done():
                self.writing.add(task)
                task.add_done_callback(self.writing.discard)
                return Landing(uuid.uuid4().hex, ident.key_id, utc_day(self.clock()), float(usd), request_id, task)
            if isinstance(task.exception(), StateUnavailable):
                self.metrics.state_errors.labels(op="reserve").inc()
                return None
            self.metrics.reserved_usd.inc(usd)
            return task.result()
        try:
            res = await self.store.reserve(ident.key_id, usd, limit=ident.limits.usd_per_day, request_id=request_id,
                                           now=self.clock())
        except OverBudget as e:
            lim = ident.limits.usd_per_day
            raise too_many("budget", f"API key {ident.key_id!r} has spent {e.spent:.6f} and holds {e.reserved:.6f} "
                           f"for requests in flight, of its {lim:g} USD for today (UTC)",
                           86400 - self.clock() % 86400) from None
        except StateUnavailable as e:
            raise self._unavailable("reserve", e) from None
        self.metrics.reserved_usd.inc(usd)
        return res

    async def settle(self, ident: Identity, res: Reservation | None, charges: list[Charge], request_id: str) -> None:
        """Charge the calls' real cost and release the reservation. Never cancelled half-way (a client that
        goes away does not stop the charge); a store failure here is logged with the amount, counted and
        retried. A key without limits waits at most `unlimited_wait_s` for it (then it goes on in the
        background)."""
        self.metrics.key_spend.labels(key=ident.key_id).inc(sum(c.usd for c in charges))
        with anyio.CancelScope(shield=True):
            if limited(ident):
                await self._settle_now(ident, res, charges, request_id)
                return
            task = self._background(self._settle_unlimited(ident, res, charges, request_id), self.writing)
            await asyncio.wait({task}, timeout=self.unlimited_wait_s)

    async def _settle_unlimited(self, ident: Identity, res: Reservation | None, charges: list[Charge],
                                request_id: str) -> None:
        if isinstance(res, Landing):  # the hold first: a charge settled before it lands would leave it to expire
            try:
                res = await res.task
                self.metrics.reserved_usd.inc(res.usd)
            except StateUnavailable:
                self.metrics.state_errors.labels(op="reserve").inc()
                res = None
        await self._settle_now(ident, res, charges, request_id)

    async def _settle_now(self, ident: Identity, res: Reservation | None, charges: list[Charge],
                          request_id: str) -> None:
        total = sum(c.usd for c in charges)
        if res is None:
            res = Reservation(uuid.uuid4().hex, ident.key_id, utc_day(self.clock()), 0.0, request_id)
        try:
            await self.store.settle(res, charges, now=self.clock())
        except StateUnavailable as e:
            self.metrics.state_errors.labels(op="settle").inc()
            log.error(json.dumps({"event": "charge_not_recorded", "key": ident.key_id, "request_id": request_id,
                                  "usd": total, "reserved_usd": res.usd, "error": str(e),
                                  "note": f"retried for {self.settle_retry_s:g} s, then the reservation is "
                                          "charged as expired"}))
            if self.settle_retry_s > 0:
                self._background(self._settle_later(ident, res, charges, request_id), self.retrying)
            else:
                self.metrics.unrecorded_usd.inc(total)

    async def _settle_later(self, ident: Identity, res: Reservation, charges: list[Charge], request_id: str) -> None:
        """A charge the store could not take, retried until the store is back (then at its real cost, and the
        hold released), for `settle_retry_s`: a hold caught in an outage must not become a worst-case charge."""
        deadline, wait = time.monotonic() + self.settle_retry_s, 0.25
        while time.monotonic() < deadline:
            await asyncio.sleep(min(wait, max(0.0, deadline - time.monotonic())))
            wait = min(wait * 2, 10.0)
            try:
                await self.store.settle(res, charges, now=self.clock())
            except StateUnavailable:
                continue
            self.metrics.settle_retries.labels(outcome="settled").inc()
            log.info(json.dumps({"event": "charge_recorded_late", "key": ident.key_id, "request_id": request_id,
                                 "usd": sum(c.usd for c in charges)}))
            return
        self.metrics.settle_retries.labels(outcome="gave_up").inc()
        self.metrics.unrecorded_usd.inc(sum(c.usd for c in charges))

    async def aclose(self, wait_s: float = 5.0) -> None:
        """Let the writes still running finish (up to `wait_s`), then stop retrying (those holds are then
        charged as expired by the store)."""
        if self.writing:
            await asyncio.wait(set(self.writing), timeout=wait_s)
        for task in [*self.writing, *self.retrying]:
            task.cancel()


class StreamCharge:
    """A passed-through stream's charge, made once: when the stream ends (its usage comes in the last chunk), or
    after the response if the stream never ran (the client left before the first byte).

    A stream the client left before it completed is closed upstream (OpenAI-compatible servers stop generating
    when the connection closes) and, unless the provider's usage had already arrived, charged the call's worst
    case (its input and its output cap, kind `abandoned`): what the provider billed up to the close is never
    reported, and an estimate from the bytes the client got would undercharge a call that kept generating."""

    def __init__(self, budgets: Budgets, pool: Pool, settings, ident: Identity, res: Reservation | None,
                 before: list[Charge], rec, request_id: str, payload: dict, response=None) -> None:
        self.budgets, self.pool, self.settings = budgets, pool, settings
        self.ident, self.res, self.before, self.rec, self.request_id = ident, res, before, rec, request_id
        self.payload, self.size = payload, payload_size(payload)
        self.response = response  # the upstream's open stream (httpx.Response), closed if the stream never ran
        self.done: list[Charge] | None = None

    async def __call__(self, usage: dict | None, output_bytes: int, *, abandoned: bool = False) -> list[Charge]:
        """Every charge of the request: the calls before the stream, and the streamed call's, from the usage the
        upstream sent (OpenAI `usage` wire form); without usage, the worst case when the client left
        (`abandoned`), else estimated from what the upstream sent."""
        from data.pool_runner.wire import usage_from_wire

        if self.done is not None:
            return self.done
        m, metrics = self.pool.get(self.rec.model), self.budgets.metrics
        latency_s = self.rec.attempt.latency_ms / 1e3 if self.rec.attempt else None
        cost = self.pool.cost_usd(m.name, usage_from_wire(usage), latency_s) if usage else None
        if cost is None and abandoned:
            cost = call_worst_case_usd(self.pool, m.name, self.payload, self.size,
                                       chars_per_token=self.settings.chars_per_token,
                                       default_output_tokens=self.settings.default_output_tokens)
            metrics.estimated_usd.labels(model=m.name).inc(cost)
            charge = Charge(m.name, "abandoned", cost)
        elif cost is None:
            cost = call_estimate_usd(m, tokens_in(self.size, self.settings.chars_per_token),
                                     tokens_in(output_bytes, self.settings.chars_per_token))
            metrics.estimated_usd.labels(model=m.name).inc(cost)
            charge = Charge(m.name, "estimated", cost)
        else:
            metrics.call_cost.labels(model=m.name).inc(cost)
            charge = Charge(m.name, "answer", cost)
        self.done = [*self.before, charge]
        await self.budgets.settle(self.ident, self.res, self.done, self.request_id)
        return self.done

    async def ensure(self) -> None:
        """After the response: a stream that never ran is closed upstream and charged as abandoned."""
        if self.done is None:
            with anyio.CancelScope(shield=True):
                if self.response is not None:
                    await self.response.aclose()
                await self(None, 0, abandoned=True)


def spend_report(rows) -> dict:
    """The ledger rows and their totals: per key and day, per model and per kind (what `switchcraft spend` prints
    and GET /v1/admin/spend returns)."""
    totals: dict[tuple[str, str], dict] = {}
    for r in rows:
        t = totals.setdefault((r.key_id, r.day), {"key": r.key_id, "day": r.day, "usd": 0.0, "calls": 0,
                                                  "by_kind": {}, "by_model": {}})
        t["usd"] += r.usd
        t["calls"] += 1
        t["by_kind"][r.kind] = t["by_kind"].get(r.kind, 0.0) + r.usd
        t["by_model"][r.model] = t["by_model"].get(r.model, 0.0) + r.usd
    return {"totals": sorted(totals.values(), key=lambda t: (t["day"], t["key"])),
            "rows": [r.to_dict() for r in rows]}


# ------------------------------------------------------------------------------------------- estimates

# What one image part may cost as input, in tokens: the most either family bills for one image (OpenAI at high
# detail: 85 + 170 per 512-px tile, at most 8 tiles after its resize = 1,445; Anthropic: about 1,600 for its
# largest, 1.15 megapixels / 750). The payload's bytes count only the URL or the base64 text.
IMAGE_INPUT_TOKENS = 1_600


def output_cap(body: dict, model: PoolModel, default_output_tokens: int) -> int:
    """The output tokens a call may produce, per choice: the larger of the request's `max_completion_tokens` and
    `max_tokens` (a provider honours one or the other; the reservation cannot know which), else the pool's, else
    the configured default."""
    caps = [v for v in (body.get("max_completion_tokens"), body.get("max_tokens"))
            if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return max(caps) if caps else model.max_output_tokens or default_output_tokens


def choices_of(body: dict) -> int:
    """How many answers the call asks for (`n`, 1 to 128): each is billed its own output."""
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def images_in(body: dict) -> int:
    """Image parts in the request's messages (`image_url` / `input_image` / `image` content parts)."""
    count = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += sum(1 for part in content if isinstance(part, dict)
                         and part.get("type") in ("image_url", "input_image", "image"))
    return count


def call_estimate_usd(model: PoolModel, input_tokens: int, output_tokens: int) -> float:
    """One call's cost at these token counts (per token), its flat price (per query), or its GPU time
    (per GPU-second: the pool's seconds per query, else the call's time-out: the longest it can run)."""
    p = model.prices
    if p.usd_per_query is not None:
        return p.usd_per_query
    if p.gpu_usd_per_hour is not None:
        seconds = p.gpu_seconds_per_query if p.gpu_seconds_per_query is not None else model.timeout_s
        return seconds * p.gpu_usd_per_hour / 3600
    out_price = max(p.output_per_mtok or 0.0, p.reasoning_per_mtok or 0.0)
    return (input_tokens * (p.input_per_mtok or 0.0) + output_tokens * out_price) / 1e6


def tokens_in(n_bytes: int, chars_per_token: float) -> int:
    return math.ceil(n_bytes / chars_per_token)


def payload_size(payload: dict) -> int:
    """Bytes of an upstream payload as JSON: what its input tokens are estimated from."""
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str).encode())


def call_worst_case_usd(pool: Pool, model: str, body: dict, payload_bytes: int, *, chars_per_token: float,
                        default_output_tokens: int) -> float:
    """One call's worst case: the model's payload size in input tokens plus what its images may be billed, its
    output cap in output tokens for each of the `n` answers asked for."""
    m = pool.get(model)
    input_tokens = tokens_in(payload_bytes, chars_per_token) + IMAGE_INPUT_TOKENS * images_in(body)
    return call_estimate_usd(m, input_tokens, output_cap(body, m, default_output_tokens) * choices_of(body))


def may_call(strategy: Strategy, ranking: Iterable[str], max_attempts: int, price) -> list[str]:
    """Every model the strategy may call at worst: its first models and tie-breaker, then the dearest
    `max_attempts` of the models it may fall back or escalate to (the gateway sends at most that many more)."""
    if strategy.kind == "single":
        fixed, rest = [], [*strategy.first, *strategy.escalate]
    else:
        fixed = [*strategy.first, *([strategy.tie_breaker] if strategy.tie_breaker else [])]
        rest = [m for m in dict.fromkeys([*strategy.escalate, *ranking]) if m not in fixed]
    rest = sorted(dict.fromkeys(rest), key=price, reverse=True)[:max_attempts]
    return fixed + rest


def worst_case_usd(pool: Pool, strategy: Strategy, ranking: Iterable[str], body: dict,
                   payload_bytes: Callable[[str], int], *, max_attempts: int, chars_per_token: float,
                   default_output_tokens: int) -> float:
    """The reservation for one request: each model it may call, at the size of what that model is sent
    (`payload_bytes(model)`: a prompt-style model's payload carries the functions in a system prompt) and its
    output cap."""
    def price(name: str) -> float:
        return call_worst_case_usd(pool, name, body, payload_bytes(name), chars_per_token=chars_per_token,
                                   default_output_tokens=default_output_tokens)

    return sum(price(m) for m in may_call(strategy, [m for m in ranking if m in pool.names], max_attempts, price))


def charges_of(run, pool: Pool, payload_bytes: dict[str, int], *, chars_per_token: float,
               default_output_tokens: int) -> list[Charge]:
    """The ledger rows of a strategy's run: each answered call at its real cost (`answer` for the one returned,
    `cascade` for the others), an answer the provider sent no usage for at an estimate from its text
    (`estimated`), a call given up after it was sent at its estimate (`abandoned`)."""
    from serving.gateway.upstream import ABANDONED

    out = []

    def estimate(model: str, output_tokens: int) -> float:
        return call_estimate_usd(pool.get(model), tokens_in(payload_bytes.get(model, 0), chars_per_token), output_tokens)

    for c in run.calls:
        if c.ok and c.cost_usd is not None:
            out.append(Charge(c.model, "answer" if c is run.returned else "cascade", c.cost_usd))
        elif c.ok:
            raw = c.answer.raw if isinstance(c.answer.raw, str) else json.dumps(c.answer.raw, default=str)
            out.append(Charge(c.model, "estimated", estimate(c.model, tokens_in(len(raw.encode()), chars_per_token))))
        elif c.outcome in ABANDONED:  # the router's expected cost; without one, the worst case of an answer
            usd = c.abandoned_usd
            out.append(Charge(c.model, "abandoned", estimate(c.model, default_output_tokens) if usd is None else usd))
    return out
