"""Where a key's budget and request rate are enforced: admit, hold the first step, extend, settle the real cost.

    budgets = Budgets.from_settings(store, metrics, cfg.state)
    await budgets.admit(ident)                          # 429 rate_limit | budget | budget_held; 503: store down
    usd = first_step_usd(pool, strategy, body, payload_bytes, chars_per_token=3.0, default_output_tokens=4096)
    res = await budgets.reserve(ident, usd, request_id)           # before any upstream call: 429 when none is left
    hold = Hold(budgets, ident, res, first_step(strategy), price)  # upstream.GATE: extends before further calls
    await budgets.settle(ident, hold.res, charges_of(run, ...))  # after the calls: the ledger, the day's spend

The state itself (counts, holds, the ledger) is in serving/core/state.py, in SQLite or Redis.
Holds are staged. Before any upstream call a request holds what its strategy's first step may cost (its
kind's `first_step`: the first model, two for an agreement cascade), each at the size of its payload in input
tokens and at the output cap the gateway sends it (`output_cap`: the caller's, else the pool's, else
`state.default_output_tokens`; every call carries one). Every further call (a fallback, a hedge, the
tie-breaker, an escalation) extends the hold by its own worst case before it is sent (`Hold.cover`), less
what was held for calls that failed unbilled (`Hold.spare`); a refused extension leaves that call unsent:
the request returns the best answer already in hand, or the 429. A hold is made or extended only while
the day's `spent + reserved` is below the key's `usd_per_day`, so concurrent requests stop at the first hold
that reaches the limit: the day ends at most one hold (or extension) past it (docs/serving.md, "State").

A 429 says when to retry: at 00:00 UTC when the settled spend alone has reached the limit, else when the
holds in its way are expected to clear (`clear_wait_s`: each hold's age against the lifetime of holds seen
to settle, at most `state.hold_clear_s`; at least 1 s).

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
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import anyio

from data.pool import Pool, PoolModel
from data.pool_runner.request import output_cap
from serving.core.auth import Identity, too_many
from serving.core.metrics import GatewayMetrics
from serving.core.errors import GatewayError, retry_after_headers, retry_after_ms
from serving.core.state import Charge, OverBudget, Reservation, StateStore, StateUnavailable, utc_day
from training.policy import Strategy
from training.policy.kinds import kind_of

log = logging.getLogger("switchcraft.gateway")
HOLD_LIFETIME_WEIGHT = 0.1  # how much each settled hold moves the running mean of hold lifetimes
# Sent, then given up (a lost hedge: cancelled): the provider may have generated, and billed, an answer.
ABANDONED = {"timeout", "dropped", "hedge_lost"}


def limited(ident: Identity) -> bool:
    return ident.limits.requests_per_minute is not None or ident.limits.usd_per_day is not None


@dataclass(frozen=True)
class Landing(Reservation):
    """A hold of a key without limits that the store had not taken when the request went on: `task` is its
    write (the store's Reservation, or StateUnavailable). Its charge waits for that write, off the request."""

    task: asyncio.Task | None = field(default=None, compare=False, repr=False)


class Budgets:
    """Keys with limits wait for the store (bounded by its own deadline: serving/core/state.py) and are
    refused with 503 when it cannot answer. Keys without limits never wait for it longer than
    `unlimited_wait_s` per step (their hold, their charge): a write still running then finishes in the
    background (`writing`), and a failed charge is retried like any other (`settle_retry_s`)."""

    def __init__(self, store: StateStore, metrics: GatewayMetrics, *, retry_after_s: float = 2.0,
                 settle_retry_s: float = 600.0, unlimited_wait_s: float = 0.25, hold_clear_s: float = 60.0,
                 clock=time.time) -> None:
        self.store, self.metrics, self.retry_after_s, self.clock = store, metrics, retry_after_s, clock
        self.settle_retry_s, self.unlimited_wait_s, self.hold_clear_s = settle_retry_s, unlimited_wait_s, hold_clear_s
        self.hold_lifetime_s: float | None = None  # running mean of how long this process's holds lasted
        self.retrying: set[asyncio.Task] = set()
        self.writing: set[asyncio.Task] = set()  # holds and charges of keys without limits, still being written

    @classmethod
    def from_settings(cls, store: StateStore, metrics: GatewayMetrics, settings) -> Budgets:
        """With the serving config's `state:` settings (serving.core.state.StateSettings)."""
        return cls(store, metrics, retry_after_s=settings.unavailable_retry_after_s,
                   settle_retry_s=settings.settle_retry_s, unlimited_wait_s=settings.unlimited_wait_s,
                   hold_clear_s=settings.hold_clear_s)

    def _unavailable(self, op: str, e: StateUnavailable, ident: Identity) -> GatewayError:
        self.metrics.state_errors.labels(op=op).inc()
        log.error(json.dumps({"event": "state_unavailable", "op": op, "store": self.store.name, "error": str(e)}))
        err = GatewayError(503, "the gateway's limit store is unavailable; this API key has limits, so it is not "
                           f"served until the store is back; retry after {self.retry_after_s:g} s",
                           type="state_unavailable", headers=retry_after_headers(retry_after_ms(self.retry_after_s)))
        err.key_id = ident.key_id
        return err

    def _background(self, coro, into: set[asyncio.Task]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        into.add(task)
        task.add_done_callback(into.discard)
        return task

    def expected_hold_s(self) -> float:
        """How long a hold is expected to last: twice the running mean of those seen to settle, at most
        `hold_clear_s` (all of it before any has settled)."""
        if self.hold_lifetime_s is None:
            return self.hold_clear_s
        return min(self.hold_clear_s, 2 * self.hold_lifetime_s)

    async def _over(self, ident: Identity, spent: float, reserved: float, what: str,
                    own: Reservation | None = None) -> GatewayError:
        """The 429 of a key whose day has no room: until 00:00 UTC when its settled spend alone reached the
        limit (`budget`), else until the holds in its way are expected to clear (`budget_held`); `own`, the
        refused request's hold, is released with its answer and is in nobody's way."""
        lim, now = ident.limits.usd_per_day, self.clock()
        if spent >= lim:
            reason, wait = "budget", 86400 - now % 86400
            why = "it resets at 00:00 UTC"
        else:
            try:
                holds = await self.store.holds(ident.key_id, utc_day(now), now)
            except StateUnavailable:
                holds = []
            holds = [(created, usd) for created, usd, rid in holds if own is None or rid != own.id]
            reason, wait = "budget_held", clear_wait_s(spent, lim, holds, now, self.expected_hold_s())
            why = "the holds of its requests in flight are expected to clear by then"
        err = too_many(reason, f"API key {ident.key_id!r} has spent {spent:.6f} and holds {reserved:.6f} for "
                       f"requests in flight, of its {lim:g} USD for today (UTC): nothing more can be held for "
                       f"{what}; {why}", wait)
        err.key_id = ident.key_id  # an admission refused has no identity yet: the decision log's row needs it
        return err

    async def admit(self, ident: Identity) -> None:
        """Count the request against the key's per-minute limit; 429 when that or today's budget is used up."""
        if not limited(ident):
            return
        lim = ident.limits
        try:
            seen = await self.store.admit(ident.key_id, rpm=lim.requests_per_minute, usd_per_day=lim.usd_per_day,
                                          now=self.clock())
        except StateUnavailable as e:
            raise self._unavailable("admit", e, ident) from None
        if seen.reason == "budget":
            raise await self._over(ident, seen.spent, seen.reserved, "another request")
        if seen.reason == "rate_limit":
            err = too_many("rate_limit", f"API key {ident.key_id!r} is limited to {lim.requests_per_minute} "
                           "requests per minute", seen.wait_s)
            err.key_id = ident.key_id
            raise err

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
                now = self.clock()
                return Landing(uuid.uuid4().hex, ident.key_id, utc_day(now), float(usd), request_id, now, task)
            if isinstance(task.exception(), StateUnavailable):
                self.metrics.state_errors.labels(op="reserve").inc()
                return None
            self.metrics.reserved_usd.inc(usd)
            return task.result()
        try:
            res = await self.store.reserve(ident.key_id, usd, limit=ident.limits.usd_per_day, request_id=request_id,
                                           now=self.clock())
        except OverBudget as e:
            raise await self._over(ident, e.spent, e.reserved, "this request") from None
        except StateUnavailable as e:
            raise self._unavailable("reserve", e, ident) from None
        self.metrics.reserved_usd.inc(usd)
        return res

    async def extend(self, ident: Identity, res: Reservation, usd: float) -> Reservation:
        """`res` held `usd` larger, for one more call of its request; 429 when the key's day has no room left,
        503 when the store cannot answer."""
        try:
            out = await self.store.extend(res, usd, limit=ident.limits.usd_per_day, now=self.clock())
        except OverBudget as e:
            raise await self._over(ident, e.spent, e.reserved, "a further call of this request", res) from None
        except StateUnavailable as e:
            raise self._unavailable("extend", e, ident) from None
        self.metrics.reserved_usd.inc(usd)
        return out

    async def settle(self, ident: Identity, res: Reservation | None, charges: list[Charge], request_id: str) -> None:
        """Charge the calls' real cost and release the reservation. Never cancelled half-way (a client that
        goes away does not stop the charge); a store failure here is logged with the amount, counted and
        retried. A key without limits waits at most `unlimited_wait_s` for it (then it goes on in the
        background)."""
        self.metrics.key_spend.labels(key=ident.key_id).inc(sum(c.usd for c in charges))
        if res is not None and res.created > 0:
            lived = max(0.0, self.clock() - res.created)
            mean = self.hold_lifetime_s
            self.hold_lifetime_s = lived if mean is None else mean + HOLD_LIFETIME_WEIGHT * (lived - mean)
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


def clear_wait_s(spent: float, limit: float, holds: list[tuple[float, float]], now: float, lifetime_s: float) -> float:
    """Seconds until enough of `holds` ((created, usd), each expected to clear `lifetime_s` after it was made,
    oldest first) have cleared for `spent` and the rest to fall below `limit`; at least 1 s."""
    left = spent + sum(usd for _, usd in holds)
    if left < limit:  # out of the way already (settled since, or only the refused request's own hold)
        return 1.0
    for created, usd in sorted(holds):
        left -= usd
        if left < limit:
            return max(1.0, created + lifetime_s - now)
    return max(1.0, lifetime_s)


class Hold:
    """One request's money in flight, staged. `res` covers the first step (`first`: its models, one call each);
    the upstream client asks `cover(model)` before every call (serving/gateway/upstream.py `GATE`), and a call
    beyond the first step extends the hold by `price(model)` (its worst case) first, less what calls that
    failed unbilled (an error status, no connection: `spare`) left unused. A refused extension
    (429, or 503 when the store is down) leaves that call unsent (outcome `budget_refused`) and is kept in
    `refused`: the request returns an answer already in hand, else that error. Keys without limits are never
    refused, and their hold is not extended (nothing is enforced on it)."""

    def __init__(self, budgets: Budgets, ident: Identity, res: Reservation | None, first: Iterable[str],
                 price: Callable[[str], float]) -> None:
        self.budgets, self.ident, self.res, self.price = budgets, ident, res, price
        self.covered = Counter(first)
        self.spared = 0.0  # held for calls that failed unbilled: pays later calls before any extension
        self.refused: GatewayError | None = None
        self.lock = asyncio.Lock()  # extensions one at a time: each is read-and-grow of the same hold

    async def cover(self, model: str) -> bool:
        async with self.lock:
            if self.covered[model] > 0:
                self.covered[model] -= 1
                return True
            if self.res is None or not limited(self.ident):
                return True
            usd = self.price(model)
            if usd <= self.spared:
                self.spared -= usd
                return True
            try:
                self.res = await self.budgets.extend(self.ident, self.res, usd - self.spared)
                self.spared = 0.0
            except GatewayError as e:
                self.refused = e
                log.info(json.dumps({"event": "hold_not_extended", "key": self.ident.key_id, "model": model,
                                     "request_id": self.res.request_id, "status": e.status, "reason": e.reason}))
                return False
            return True

    def spare(self, model: str) -> None:
        self.spared += self.price(model)


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
        from data.wire.raw import usage_from_wire

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


def first_step(strategy: Strategy) -> tuple[str, ...]:
    """The models a strategy calls before any answer is in, as its kind says (`StrategyKind.first_step`)."""
    return kind_of(strategy).first_step(strategy)


def first_step_usd(pool: Pool, strategy: Strategy, body: dict, payload_bytes: Callable[[str], int], *,
                   chars_per_token: float, default_output_tokens: int) -> float:
    """What a request holds before its first upstream call: each model of the strategy's first step (`first_step`:
    one, or an agreement's two, called together) at the size of what that model is sent (`payload_bytes(model)`:
    a prompt-style model's payload carries the functions in a system prompt) and the output cap it is sent."""
    return sum(call_worst_case_usd(pool, m, body, payload_bytes(m), chars_per_token=chars_per_token,
                                   default_output_tokens=default_output_tokens) for m in first_step(strategy))


def charges_of(run, pool: Pool, payload_bytes: dict[str, int], *, chars_per_token: float,
               default_output_tokens: int) -> list[Charge]:
    """The ledger rows of a strategy's run: each answered call at its real cost (`answer` for the one returned,
    `cascade` for the others), an answer the provider sent no usage for at an estimate from its text
    (`estimated`), a call given up after it was sent at its estimate (`abandoned`)."""

    out = []

    def estimate(model: str, output_tokens: int) -> float:
        return call_estimate_usd(pool.get(model), tokens_in(payload_bytes.get(model, 0), chars_per_token), output_tokens)

    for c in run.calls:  # an answer is paid for whether or not it was usable (an unmet tool_choice)
        if c.answer is not None and c.cost_usd is not None:
            out.append(Charge(c.model, "answer" if c is run.returned else "cascade", c.cost_usd))
        elif c.answer is not None:
            raw = c.answer.raw if isinstance(c.answer.raw, str) else json.dumps(c.answer.raw, default=str)
            out.append(Charge(c.model, "estimated", estimate(c.model, tokens_in(len(raw.encode()), chars_per_token))))
        elif c.outcome in ABANDONED:  # the router's expected cost; without one, the worst case of an answer
            usd = c.abandoned_usd
            out.append(Charge(c.model, "abandoned", estimate(c.model, default_output_tokens) if usd is None else usd))
    return out
