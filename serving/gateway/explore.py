"""Exploration: after a request is answered, also ask the pool models its strategy did not call.

    explorer = Explorer(cfg.explore, pool, cascade, budgets, decision_log, metrics)   # an observer
    explorer(served)       # maybe schedules the calls; returns at once: never adds latency to the answer

What `switchcraft learn` needs from traffic is every pool model's answer on a few hundred requests (consensus
labels come from their agreement in meaning). Exploration gets them:
- on a sampled share `explore.rate` of answered (non-streamed) requests, from the first request on, every pool
  model the strategy did not call (`explore.models`: all, or a list) that the caller's key and request allow:
  exploration sends a conversation only where the request itself could have gone (a key restricted to some
  models is a data policy, not only a price list);
- `explore.min_answers` is a per-model target, never a reason to explore more often: the models still under it
  are counted (`switchcraft_explore_models_below_target`); at rate r a model newly added to the pool file reaches
  it after about min_answers / r requests;
- within the operator's own budget `explore.usd_per_day`, held and charged in the state store under the key id
  `__explore__` (a reservation first, like any request: `switchcraft spend --key __explore__`), never a caller's;
- at most `explore.concurrency` explorations at once (more are skipped and counted).
The answers go to the decision log with role `explore`, next to the request's own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random

from data.pool import Pool
from serving.gateway.answers import upstream_body
from serving.core.auth import OPERATOR_KEY, Identity, KeyLimits
from serving.core.budget import Budgets, call_worst_case_usd, charges_of, payload_size
from serving.gateway.cascade import Cascade, CascadeRequest, Run
from serving.core.record import Served
from serving.core.errors import GatewayError
from serving.core.state import Charge
from serving.tools.policy import Caller
from training.policy import Strategy

log = logging.getLogger("switchcraft.gateway")


class Explorer:
    def __init__(self, settings, pool: Pool, cascade: Cascade, budgets: Budgets, decision_log, metrics, *,
                 state_settings, seed: int | None = None) -> None:
        unknown = [] if settings.models == "all" else [m for m in settings.models if m not in pool.names]
        if unknown:
            raise ValueError(f"explore.models names {unknown}, not in the pool; pool: {', '.join(pool.names)}")
        self.settings, self.pool, self.cascade, self.budgets = settings, pool, cascade, budgets
        self.decision_log, self.metrics, self.state_settings = decision_log, metrics, state_settings
        self.operator = Identity(OPERATOR_KEY, Caller(), KeyLimits(usd_per_day=settings.usd_per_day))
        self.rng = random.Random(seed)
        self.counts = decision_log.answer_counts() if decision_log is not None else {}
        self.tasks: set[asyncio.Task] = set()
        metrics.explore_below_target.set(len(self.below_target()))

    def models_for(self, served: Served) -> list[str]:
        """The pool models to ask about this request: none unless it is in the sampled share, then every one the
        strategy did not call that the caller allows (and `explore.models` lists)."""
        if self.rng.random() >= self.settings.rate:
            return []
        called = {c.model for c in served.run.calls if c.sent}
        wanted, allowed = self.settings.models, served.allowed_models
        return [m for m in self.pool.names if m not in called and (wanted == "all" or m in wanted)
                and (allowed is None or m in allowed)]

    def below_target(self) -> list[str]:
        """The explored pool models with fewer logged answers than `explore.min_answers`."""
        wanted = self.settings.models
        return [m for m in self.pool.names if (wanted == "all" or m in wanted)
                and self.counts.get(m, 0) < self.settings.min_answers]

    def __call__(self, served: Served) -> None:
        if served.status != 200 or served.run is None or served.stream or not served.body:
            return
        models = self.models_for(served)
        if not models:
            return
        if len(self.tasks) >= self.settings.concurrency:
            self.metrics.explorations.labels(outcome="skipped_busy").inc()
            return
        task = asyncio.get_running_loop().create_task(self.explore(served, models))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def explore(self, served: Served, models: list[str]) -> list:
        body = {k: v for k, v in served.body.items() if k not in ("stream", "stream_options")}
        payloads: dict[str, dict] = {}

        def body_for(model: str) -> dict:
            if model not in payloads:
                payloads[model] = upstream_body(body, served.tools, self.pool.get(model))
            return payloads[model]

        sizes = {m: payload_size(body_for(m)) for m in models}
        worst = sum(call_worst_case_usd(self.pool, m, body, sizes[m], chars_per_token=self.state_settings.chars_per_token,
                                        default_output_tokens=self.state_settings.default_output_tokens)
                    for m in models)
        try:
            res = await self.budgets.reserve(self.operator, worst, served.request_id)
        except GatewayError as e:
            self.metrics.explorations.labels(outcome="skipped_budget" if e.status == 429 else "failed").inc()
            return []
        run = Run(Strategy.single(models[0]))
        try:
            req = CascadeRequest(body_for, served.tools)
            run.calls = list(await asyncio.gather(*(self.cascade._call(m, "explore", req) for m in models)))
        except Exception as e:  # noqa: BLE001 - exploration never fails anything else
            log.error(json.dumps({"event": "explore_failed", "request_id": served.request_id,
                                  "error": type(e).__name__}))
            self.metrics.explorations.labels(outcome="failed").inc()
            await self.budgets.settle(self.operator, res, [Charge("*", "abandoned", worst)], served.request_id)
            return []
        charged = [Charge(c.model, "explore" if c.kind == "cascade" else c.kind, c.usd)
                   for c in charges_of(run, self.pool, sizes, chars_per_token=self.state_settings.chars_per_token,
                                       default_output_tokens=self.state_settings.default_output_tokens)]
        await self.budgets.settle(self.operator, res, charged, served.request_id)
        for rec in run.calls:
            self.metrics.explore_calls.labels(model=rec.model).inc()
            if rec.ok:
                self.counts[rec.model] = self.counts.get(rec.model, 0) + 1
        self.metrics.explore_below_target.set(len(self.below_target()))
        self.metrics.explore_cost.inc(sum(c.usd for c in charged))
        self.metrics.explorations.labels(outcome="explored").inc()
        if self.decision_log is not None:
            self.decision_log.answers(served.request_id, run.calls)
        return run.calls

    async def flush(self) -> None:
        """Wait for the explorations in flight (tests, shutdown)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def aclose(self) -> None:
        await self.flush()
