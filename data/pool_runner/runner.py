"""Send every example to every model of the pool, resumably, within a budget.

    switchcraft pool run --pool configs/pool.yaml --examples runs/default/examples.parquet --max-usd 20

Each model is asked in its provider's API (`api:` in the pool file,
data/wire/). Per model: `concurrency` workers share its queue of calls, a pacer keeps
requests under `requests_per_minute`. A call already `done` in the store (same
example, model and request hash) is never sent again; one left `pending` by a
killed run is sent again with the same Idempotency-Key. A call counts (progress,
spend, summary) only once its answer is committed to the store.

    from data.pool_runner import run_pool
    summary = run_pool(pool, examples, "runs/x/pool_calls.sqlite", out="runs/x/outputs.parquet")
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import platform
import random
import time
from collections import deque
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

from data.errors import DataError
from data.pool import Pool, PoolModel
from data import wire
from data.pool_runner.client import CallFailed, RetryPolicy, post_completion
from data.pool_runner.export import export_outputs
from data.pool_runner.limits import Budget, BudgetExceeded, RequestPacer
from data.pool_runner.progress import PoolProgress
from data.pool_runner.request import PlannedCall, estimate_input_tokens, idempotency_key, plan_calls
from data.pool_runner.store import CallStore
from data.schema import Example, Usage

POOL_SHARD = 8


@dataclass
class ModelSummary:
    model: str
    total: int
    done_before: int = 0
    done_now: int = 0
    failed: int = 0
    not_started: int = 0
    spent_usd: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.done_before + self.done_now == self.total


@dataclass
class RunSummary:
    models: dict[str, ModelSummary]
    resent_in_flight: int  # calls a previous run had sent but not stored when it stopped
    budget_stop: str | None = None
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return all(m.complete for m in self.models.values())

    @property
    def calls_made(self) -> int:
        return sum(m.done_now for m in self.models.values())


def api_keys(pool: Pool) -> dict[str, str | None]:
    """Each model's key from its environment variable; a missing one fails before any call."""
    keys, missing = {}, {}
    for m in pool.models:
        if m.api_key_env is None:
            keys[m.name] = None
        elif os.environ.get(m.api_key_env):
            keys[m.name] = os.environ[m.api_key_env]
        else:
            missing.setdefault(m.api_key_env, []).append(m.name)
    if missing:
        what = "; ".join(f"{env} (for {', '.join(ms)})" for env, ms in missing.items())
        raise DataError(
            f"environment variable(s) not set: {what}", hint="export them, or set api_key_env: null"
        )
    return keys


@dataclass
class _Run:
    """What the workers of one run share."""

    store: CallStore
    budget: Budget
    summary: RunSummary
    bars: PoolProgress
    keys: dict[str, str | None]
    backoff_base_s: float
    rng: random.Random
    pending_writes: list[asyncio.Future] = field(default_factory=list)

    async def worker(
        self, model: PoolModel, queue: deque[PlannedCall], pacer: RequestPacer, client
    ) -> None:
        policy = RetryPolicy(max_retries=model.max_retries, base_s=self.backoff_base_s)
        url = wire.url(model.base_url, model.api)
        while queue and not self.budget.stopped:
            c = queue.popleft()
            est_out = self.budget.output_estimate(model.name, model.max_output_tokens)
            # Per GPU-second, the timeout bounds the latency as max_output_tokens bounds the output.
            est = model.prices.cost_usd(
                Usage(input_tokens=estimate_input_tokens(c.body), output_tokens=est_out),
                latency_s=model.timeout_s,
            )
            try:
                await self.budget.reserve(est)
            except BudgetExceeded as e:
                self.summary.budget_stop = self.summary.budget_stop or str(e)
                queue.appendleft(c)
                return
            await self.call(model, c, url, policy, pacer, client, est)

    async def call(
        self, model, c: PlannedCall, url, policy, pacer, client, reserved_usd: float
    ) -> None:
        ms = self.summary.models[model.name]
        # Marked before sending, not awaited: the Idempotency-Key makes a lost marker harmless.
        self.pending_writes.append(
            self.store.mark_pending(c.example.id, model.name, c.request_hash)
        )
        try:
            res = await post_completion(
                client,
                url,
                wire.native_request(model.api, c.body),
                api_key=self.keys[model.name],
                idempotency_key=idempotency_key(c.example.id, model.name, c.request_hash),
                timeout_s=model.timeout_s,
                policy=policy,
                pacer=pacer,
                rng=self.rng,
                api=model.api,
            )
        except CallFailed as e:
            self.budget.settle(model.name, reserved_usd, 0.0, None)
            await self.store.record_failed(
                c.example.id, model.name, c.request_hash, error=str(e), attempts=e.attempts
            )
            ms.failed += 1
            if len(ms.errors) < 5:
                ms.errors.append(f"{c.example.id}: {e}")
            self.bars.failed(model.name)
            return
        cost = model.prices.cost_usd(res.usage, res.latency_s)
        await self.store.record_done(
            c.example.id,
            model.name,
            c.request_hash,
            raw=res.raw,
            usage=res.usage,
            cost_usd=cost,
            latency_s=res.latency_s,
            attempts=res.attempts,
        )
        # Counted only now, after the commit.
        self.budget.settle(model.name, reserved_usd, cost, res.usage.output_tokens)
        ms.done_now += 1
        ms.spent_usd += cost or 0.0
        self.bars.done(model.name, cost)


def _client_shards(model: PoolModel, ssl_context) -> list[httpx.AsyncClient]:
    """Connection pools of at most POOL_SHARD connections, each shared by that many workers:
    httpcore scans every connection of a pool on each request, so one pool of 64 costs several
    times the CPU per call of eight pools of 8 (measured with evaluation/bench_pool.py)."""
    limits = httpx.Limits(max_connections=POOL_SHARD, max_keepalive_connections=POOL_SHARD)
    n = -(-model.concurrency // POOL_SHARD)
    return [httpx.AsyncClient(limits=limits, trust_env=False, verify=ssl_context) for _ in range(n)]


async def run_pool_async(
    pool: Pool,
    examples: list[Example],
    store: CallStore,
    *,
    max_usd: float | None = None,
    backoff_base_s: float = 0.5,
    progress: bool | None = None,
    seed: int = 0,
) -> RunSummary:
    started = time.monotonic()
    keys = api_keys(pool)
    plans = plan_calls(pool, examples)
    status = store.status_of()
    summary = RunSummary(models={}, resent_in_flight=0)
    todo: dict[str, deque[PlannedCall]] = {}
    for name, calls in plans.items():
        ms = summary.models[name] = ModelSummary(name, total=len(calls))
        todo[name] = deque()
        for c in calls:
            st = status.get((c.example.id, name, c.request_hash))
            if st == "done":
                ms.done_before += 1
            else:
                summary.resent_in_flight += st == "pending"
                todo[name].append(c)
    ssl_context = httpx.create_ssl_context()  # built once: loading the CA bundle takes ~0.1 s
    clients = {m.name: _client_shards(m, ssl_context) for m in pool.models}
    with PoolProgress({n: len(c) for n, c in plans.items()}, enabled=progress) as bars:
        for name, ms in summary.models.items():
            for _ in range(ms.done_before):
                bars.done(name, None)
        run = _Run(
            store,
            Budget(max_usd, store.spent_usd()),
            summary,
            bars,
            keys,
            backoff_base_s,
            random.Random(seed),
        )
        tasks = []
        for m in pool.models:
            pacer = RequestPacer(m.requests_per_minute)  # one per model, shared by its workers
            for i in range(m.concurrency):
                client = clients[m.name][i // POOL_SHARD]
                tasks.append(asyncio.create_task(run.worker(m, todo[m.name], pacer, client)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*run.pending_writes, return_exceptions=True)
            for shards in clients.values():
                for client in shards:
                    await client.aclose()
    for name, queue in todo.items():
        summary.models[name].not_started = len(queue)
    summary.seconds = time.monotonic() - started
    return summary


def run_pool(
    pool: Pool,
    examples: list[Example],
    store_path: str | Path,
    *,
    out: str | Path | None = None,
    **kwargs,
) -> RunSummary:
    """Run (or resume) the pool; with `out`, write every stored answer of this plan as outputs.parquet."""
    store = CallStore(store_path)
    try:
        summary = asyncio.run(run_pool_async(pool, examples, store, **kwargs))
        if out is not None:
            export_outputs(store, plan_calls(pool, examples), out)
            write_run_record(
                out,
                pool,
                summary,
                store=store_path,
                n_examples=len(examples),
                max_usd=kwargs.get("max_usd"),
            )
    finally:
        store.close()
    return summary


def write_run_record(
    out: str | Path,
    pool: Pool,
    summary: RunSummary,
    *,
    store: str | Path,
    n_examples: int,
    max_usd: float | None,
) -> Path:
    """`<out>.json` beside the outputs: the pool (key variable names, never keys), the run's
    counts and spend, and the versions that produced it."""
    versions: dict[str, Any] = {"python": platform.python_version()}
    for pkg in ("switchcraft", "httpx", "pydantic"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    record = {
        "command": "switchcraft pool run",
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "store": str(store),
        "examples": n_examples,
        "max_usd": max_usd,
        "pool": pool.model_dump(mode="json"),
        "summary": {
            "seconds": round(summary.seconds, 3),
            "complete": summary.complete,
            "budget_stop": summary.budget_stop,
            "resent_in_flight": summary.resent_in_flight,
            "models": {n: dataclasses.asdict(m) for n, m in summary.models.items()},
        },
        "versions": versions,
    }
    path = Path(out).with_suffix(".json")
    path.write_text(json.dumps(record, indent=2))
    return path
