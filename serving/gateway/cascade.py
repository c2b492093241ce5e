"""Running a routing strategy in the gateway, whatever its kind: one model with its fallbacks, an agreement cascade.

    cascade = Cascade(upstreams, pool, metrics, max_attempts=3)
    run = await cascade.run(strategy, CascadeRequest(body_for, tools, ranking, costs))
    run.returned.answer.body        # the completion to return (OpenAI tool_calls)
    run.error                       # when no answer came (`returned` None): the caller's error (502/503/429, 4xx)
    run.trace()                     # every call: model, role, outcome, latency, usage, cost, raw, decoded calls

The strategy's kind runs it (`training.policy.kinds`: `StrategyKind.execute`, the
one copy of its rules, which the offline simulation and the replay of logged
traffic follow too) through an `Execution`, which makes the calls the kind asks
for and adds what only live calls have: a model that fails gives no answer and
agrees with nothing (no kind of disagreement); one already called answers again
at no cost; one that fails is skipped like a fallback (at most `max_attempts`
new calls on escalation). "Cheaper" is by the decision's expected cost of the
model for this request (`Decision.costs`).

`Execution.fallbacks` is the single model's path: its model, then its
fallbacks, one at a time (at most `max_attempts`); a request the upstream
rejects (400/413/422) goes back to the caller. Elsewhere such a rejection is
one model's failure (requests differ per prompt style); it reaches the caller
only when no model answered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from data.pool import Pool
from data.wire.raw import WireError
from data.schema import Tool
from data.verify.agree import calls_agree, disagreement_kind
from serving.gateway.answers import Answer, read_answer
from serving.core.errors import GatewayError
from serving.core.metrics import GatewayMetrics
from serving.gateway.tool_choice import AUTO, ToolChoice
from serving.core.budget import ABANDONED
from serving.gateway.upstream import Attempt, Upstreams
from training.policy.kinds import escalation, kind_of
from training.policy.strategy import Strategy

MODEL_HEADER = "x-switchcraft-model"


@dataclass
class CascadeRequest:
    """What a strategy needs of one request."""

    body_for: Callable[[str], dict[str, Any]]  # model -> its upstream payload (non-streamed)
    tools: list[Tool]  # the request's tools: decoding and the agreement check
    ranking: list[str] = field(default_factory=list)  # the decision's order: fallbacks after `escalate`
    costs: Mapping[str, float] = field(default_factory=dict)  # expected cost per model: which answer is cheaper
    down: set[str] = field(default_factory=set)  # endpoints that refused a connection during this request
    choice: ToolChoice = AUTO  # what the caller's tool_choice asks: an answer without a required call fails


@dataclass
class CallRecord:
    """One upstream call of a strategy and what came of it."""

    model: str
    role: str  # first | tie_breaker | escalate | fallback | hedge
    attempt: Attempt | None = None
    answer: Answer | None = None
    cost_usd: float | None = None
    rejected: GatewayError | None = None  # the upstream refused the request itself (400/413/422)

    @property
    def ok(self) -> bool:
        """An answer the caller may get: read, and doing what its tool_choice asks (an unmet one is still paid)."""
        return self.answer is not None and self.answer.unmet is None

    @property
    def calls(self) -> list | None:
        """The decoded calls of an answer the caller may get ([] for none); None when there is no such answer."""
        return self.answer.calls if self.ok else None

    @property
    def outcome(self) -> str:
        return self.attempt.outcome if self.attempt else "not_sent"

    @property
    def sent(self) -> bool:
        return self.attempt is not None and self.attempt.sent

    @property
    def abandoned_usd(self) -> float | None:
        return self.attempt.estimated_cost_usd if self.attempt else None

    def trace(self, returned: bool) -> dict[str, Any]:
        a, u = self.answer, self.answer.usage if self.answer else None
        return {"model": self.model, "role": self.role, "outcome": self.outcome,
                "status": self.attempt.status if self.attempt else None,
                "latency_ms": round(self.attempt.latency_ms, 2) if self.attempt else None,
                "usage": ({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                           "reasoning_tokens": u.reasoning_tokens} if u is not None and u.known else None),
                "cost_usd": self.cost_usd, "raw": a.raw if a else None, "calls": a.calls_json() if a else None,
                "decoder": a.decoder if a else None, "decode_error": a.decode_error if a else None,
                **({"tool_choice_unmet": a.unmet} if a and a.unmet else {}),
                **({"dropped_calls": a.dropped} if a and a.dropped else {}),
                "returned": returned, "abandoned": self.outcome in ABANDONED,
                "estimated_cost_usd": self.abandoned_usd}


@dataclass
class Run:
    """A strategy's run: every call, the agreement checks, and which answer goes back."""

    strategy: Strategy
    calls: list[CallRecord] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    verdict: str | None = None  # agree | disagree | tie_broken | resolved (cascades only)
    returned: CallRecord | None = None
    rule: str | None = None  # why that answer: single | fallback | agree | tie_broken | resolved | escalate
    reused: bool = False  # the returned answer came from a call made earlier in the cascade
    error: GatewayError | None = None  # why no answer came (what the caller is told); None when one did

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd for c in self.calls if c.cost_usd is not None)

    @property
    def abandoned(self) -> list[CallRecord]:
        return [c for c in self.calls if c.outcome in ABANDONED]

    @property
    def abandoned_usd(self) -> float:
        return sum(c.abandoned_usd or 0.0 for c in self.abandoned)

    @property
    def attempts(self) -> list[Attempt]:
        return [c.attempt for c in self.calls if c.attempt is not None]

    def trace(self) -> dict[str, Any]:
        return {
            "agreement": {"verdict": self.verdict, "checks": self.checks} if kind_of(self.strategy).compares else None,
            "escalated": self.rule == "escalate",
            "returned": None if self.returned is None else {"model": self.returned.model, "rule": self.rule,
                                                            "reused": self.reused},
            "calls": [c.trace(c is self.returned) for c in self.calls],
            "cost_usd": self.cost_usd,
            "cost_complete": all(c.cost_usd is not None for c in self.calls if c.outcome == "ok"),
            # Sent, then given up (timeout, dropped, a lost hedge): the provider may bill them; not in cost_usd.
            "abandoned": {"calls": len(self.abandoned), "estimated_cost_usd": self.abandoned_usd},
            "attempts": [asdict(a) for a in self.attempts],
            **({"dropped_calls": self.returned.answer.dropped}  # what the caller's tool_choice took out
               if self.returned is not None and self.returned.answer is not None and self.returned.answer.dropped
               else {}),
            **({} if self.returned is None else {
                "answered_by": self.returned.model,
                "fallback": any(not c.ok for c in self.calls[: self.calls.index(self.returned)])}),
        }

    def headers(self) -> dict[str, str]:
        """The trace in headers (ASCII: `->` for the arrow in a strategy's name)."""
        headers = {MODEL_HEADER: self.returned.model, "x-switchcraft-strategy": self.strategy.name.replace("→", "->"),
                   "x-switchcraft-models-called": ",".join(c.model for c in self.calls if c.sent),
                   "x-switchcraft-cost-usd": f"{self.cost_usd:.8f}"}
        if self.verdict is not None:
            headers["x-switchcraft-agreement"] = self.verdict
        return headers


class Cascade:
    def __init__(self, upstreams: Upstreams, pool: Pool, metrics: GatewayMetrics, *, max_attempts: int,
                 hedge_after_s: float | None = None) -> None:
        self.upstreams, self.pool, self.metrics, self.max_attempts = upstreams, pool, metrics, max_attempts
        self.hedge_after_s = hedge_after_s

    async def run(self, strategy: Strategy, req: CascadeRequest) -> Run:
        """The strategy's run: every call made, and its answer (`returned`) or, when none came, `error`.

        Returned either way, never raised: the calls of a run without an answer are charged, logged and traced
        like any other, so the caller always gets them with the error."""
        run = Run(strategy)
        try:
            await kind_of(strategy).execute(strategy, Execution(self, run, req))
        except GatewayError as e:  # raised by the steps below: no answer, or the upstream refused the request
            run.error = e
        self.record(run)
        return run

    async def _call(self, model: str, role: str, req: CascadeRequest, rec: CallRecord | None = None) -> CallRecord:
        rec, attempts = rec or CallRecord(model, role), []
        try:
            result = await self.upstreams.attempt(model, req.body_for(model), attempts, down=req.down,
                                                  estimate=req.costs.get(model))
        except GatewayError as e:
            rec.rejected, result = e, None
        rec.attempt = attempts[-1] if attempts else None
        if result is not None and result.body is not None:
            self.read(rec, result.body, req.tools, req.choice)
        return rec

    def read(self, rec: CallRecord, body: dict[str, Any], tools: list[Tool], choice: ToolChoice = AUTO) -> None:
        """Decode a call's completion into `rec.answer` and cost it; an unreadable message is a bad body, one
        without the call `choice` requires is `tool_choice_unmet` (paid, not returned)."""
        model = rec.model
        try:
            rec.answer = read_answer(body, self.pool.get(model), tools, choice)
        except WireError:
            rec.attempt.outcome = "bad_body"  # type: ignore[union-attr]
            self.metrics.upstream_errors.labels(model=model, reason="bad_body").inc()
            return
        # The pool's price: per token (usage), per GPU-second (this call's latency) or per query.
        rec.cost_usd = self.pool.cost_usd(model, rec.answer.usage, rec.attempt.latency_ms / 1e3)
        if rec.cost_usd is not None:
            self.metrics.call_cost.labels(model=model).inc(rec.cost_usd)
        kind = "tool_calls" if rec.answer.calls else (rec.answer.decode_error or "no_call").split(":", 1)[0]
        self.metrics.decoded.labels(model=model, result=kind if kind in ("tool_calls", "malformed") else "no_call").inc()
        if rec.answer.unmet is not None:
            rec.attempt.outcome = "tool_choice_unmet"  # type: ignore[union-attr]
            self.metrics.upstream_errors.labels(model=model, reason="tool_choice_unmet").inc()

    def _answer(self, run: Run, rec: CallRecord, rule: str, reused: bool = False) -> None:
        run.returned, run.rule, run.reused = rec, rule, reused

    async def fallbacks(self, run: Run, req: CascadeRequest, models: Sequence[str]) -> None:
        """The first model, then the others one at a time: at most `max_attempts` calls sent (skipped endpoints do
        not count). With `hedge_after_s`, the second is also asked when the first is that slow; the first answer
        wins."""
        candidates, sent, start = list(models), 0, 0
        if self.hedge_after_s is not None and len(candidates) > 1 and self.max_attempts > 1:
            recs = await self._hedge(req, candidates[0], candidates[1])
            start = len(recs)
            run.calls += recs
            sent += sum(rec.sent for rec in recs)
            for rec in recs:
                if rec.rejected is not None:
                    rec.rejected.attempts = [asdict(x) for x in run.attempts]
                    raise rec.rejected
            answered = [r for r in recs if r.ok]
            if answered:
                return self._answer(run, answered[0], "single" if answered[0] is recs[0] else "hedge")
            for rec in recs:
                self.metrics.fallbacks.labels(from_model=rec.model, reason=rec.outcome).inc()
        counted = len(run.calls)  # failed calls already counted as fallbacks
        for model in candidates[start:]:
            if sent >= self.max_attempts:
                break
            if len(run.calls) > counted:  # the previous call failed: this one is a fallback
                self.metrics.fallbacks.labels(from_model=run.calls[-1].model, reason=run.calls[-1].outcome).inc()
                counted = len(run.calls)
            rec = await self._call(model, "first" if not run.calls else "fallback", req)
            run.calls.append(rec)
            sent += rec.sent
            if rec.rejected is not None:
                rec.rejected.attempts = [asdict(x) for x in run.attempts]
                raise rec.rejected
            if rec.ok:
                return self._answer(run, rec, "single" if len(run.calls) == 1 else "fallback")
        raise self.no_answer(run)

    async def _hedge(self, req: CascadeRequest, first: str, second: str) -> list[CallRecord]:
        """`first`; if it has not answered after `hedge_after_s`, `second` as well. The first answer (or caller
        error) wins; the call still running is cancelled: abandoned, at its estimated cost."""
        a = CallRecord(first, "first")
        task_a = asyncio.ensure_future(self._call(first, "first", req, a))
        t0 = time.perf_counter()
        done, _ = await asyncio.wait({task_a}, timeout=self.hedge_after_s)
        if done:
            task_a.result()
            return [a]
        b = CallRecord(second, "hedge")
        self.metrics.hedges.labels(model=second).inc()
        task_b = asyncio.ensure_future(self._call(second, "hedge", req, b))
        tasks, pending = {task_a: a, task_b: b}, {task_a, task_b}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    t.result()  # an unexpected error surfaces here
                if any(tasks[t].ok or tasks[t].rejected is not None for t in done):
                    break
        finally:
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for t in pending:
            rec, estimate = tasks[t], req.costs.get(tasks[t].model)
            rec.attempt = Attempt(rec.model, "hedge_lost", None, (time.perf_counter() - t0) * 1e3, estimate)
            self.upstreams.abandoned(rec.model, "hedge_lost", estimate)
        return [a, b]

    def compare(self, run: Run, x: CallRecord, y: CallRecord, tools: list[Tool]) -> tuple[bool, str | None]:
        """An agreement check of two calls, recorded in the run: (agree, how they disagree; None for a silent one)."""
        check: dict[str, Any] = {"models": [x.model, y.model]}
        silent = [r for r in (x, y) if not r.ok]
        if silent:
            check.update(agree=False, why="; ".join(f"{r.model} gave no answer ({r.outcome})" for r in silent))
        else:
            check["agree"] = calls_agree(tools, x.answer.calls, y.answer.calls)
            if not check["agree"]:
                check["kind"] = disagreement_kind(tools, x.answer.calls, y.answer.calls)
        run.checks.append(check)
        return check["agree"], check.get("kind")

    async def escalate(self, run: Run, req: CascadeRequest, held: Mapping[str, CallRecord]) -> None:
        """`escalation`'s order (`escalate`, then the rest of the ranking): the first that answers goes back, one in
        `held` again at no cost; at most `max_attempts` new calls."""
        s, new_calls, recs = run.strategy, 0, dict(held)
        for model in escalation(s, req.ranking):
            rec, reused = recs.get(model), True
            if rec is None:
                if new_calls >= self.max_attempts:
                    continue  # no new calls left; an answer already in hand may still come
                rec, reused = await self._call(model, "escalate" if model in s.escalate else "fallback", req), False
                recs[model], new_calls = rec, new_calls + rec.sent
                run.calls.append(rec)
                self._count_failures(rec)
            if rec.ok:
                return self._answer(run, rec, "escalate", reused)
        answered = [r for r in run.calls if r.ok]  # a model of the run the decision does not rank
        if answered:
            return self._answer(run, answered[0], "escalate", True)
        rejected = [r.rejected for r in run.calls if r.rejected is not None]
        if rejected:
            rejected[0].attempts = [asdict(x) for x in run.attempts]
            raise rejected[0]
        raise self.no_answer(run)

    def no_answer(self, run: Run) -> GatewayError:
        """Why no answer came: the upstreams' error, or, when a model answered without the call the caller's
        tool_choice requires, a 502 naming each such model (the field: `tool_choice`)."""
        err = self.upstreams.no_answer(run.attempts)
        unmet = [c.answer.unmet for c in run.calls if c.answer is not None and c.answer.unmet]
        if not unmet or err.status != 502:
            return err
        return GatewayError(502, f"no model answered as tool_choice asks: {'; '.join(unmet)}", type="upstream_error",
                            param="tool_choice", attempts=err.attempts)

    def _count_failures(self, *recs: CallRecord) -> None:
        """A failed call in a cascade is a fallback: the cascade goes on without its answer."""
        for rec in recs:
            if not rec.ok:
                self.metrics.fallbacks.labels(from_model=rec.model, reason=rec.outcome).inc()

    def record(self, run: Run) -> None:
        """The run in the metrics: verdict, escalation, calls made, total cost."""
        m = self.metrics
        if run.verdict is not None:
            m.agreements.labels(verdict=run.verdict).inc()
        if run.rule == "escalate" and run.returned is not None:
            m.escalations.labels(to_model=run.returned.model).inc()
        m.calls_per_request.observe(sum(c.sent for c in run.calls))
        m.request_cost.observe(run.cost_usd)


class Execution:
    """One run's calls as its strategy's kind asks for them (`training.policy.kinds.Executor`): each call made is
    recorded in the run (in order), and a failed one counted as a fallback."""

    def __init__(self, cascade: Cascade, run: Run, req: CascadeRequest) -> None:
        self.cascade, self.run, self.req = cascade, run, req
        self.price = req.costs

    async def together(self, models: Sequence[str]) -> list[CallRecord]:
        recs: dict[str, CallRecord] = {}

        async def call_first(model: str) -> None:
            recs[model] = await self.cascade._call(model, "first", self.req)

        async with anyio.create_task_group() as tg:
            for model in models:
                tg.start_soon(call_first, model)
        out = [recs[m] for m in models]
        self.run.calls += out
        self.cascade._count_failures(*out)
        return out

    async def call(self, model: str, role: str) -> CallRecord:
        rec = await self.cascade._call(model, role, self.req)
        self.run.calls.append(rec)
        self.cascade._count_failures(rec)
        return rec

    def compare(self, x: CallRecord, y: CallRecord) -> tuple[bool, str | None]:
        return self.cascade.compare(self.run, x, y, self.req.tools)

    def verdict(self, verdict: str | None) -> None:
        self.run.verdict = verdict

    def answer(self, rec: CallRecord, rule: str, *, reused: bool = False) -> None:
        self.cascade._answer(self.run, rec, rule, reused)

    async def fallbacks(self, models: Sequence[str]) -> None:
        await self.cascade.fallbacks(self.run, self.req, models)

    async def escalate(self, held: Mapping[str, CallRecord]) -> None:
        await self.cascade.escalate(self.run, self.req, held)
