"""Load test of the whole gateway stack on loopback (replay upstreams), optionally with endpoints killed mid-run.

    switchcraft bench gateway --router runs/bfcl_v1/router_onnx -n 400 -c 16 --kill api.openai.com --kill-at 100
    switchcraft bench gateway --processes 2 --state redis     # or --workers 2 --state sqlite (one port)
    switchcraft bench gateway --workers 2 --state redis --log postgres   # the decision log in a PostgreSQL of its own

Method and figures: docs/performance.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path

import httpx
import yaml

from data.pool import load_pool
from data.replay.recordings import read_recordings
from data.replay.serve import ReplayServer, build_state
from evaluation.bench._support import closed_loop, config_record, md_table, percentiles, serve_gateway, write_outputs
from evaluation.harness import free_port, spawn, stop, wait_until
from serving.core.auth import new_key
from serving.gateway.breaker import endpoint_of

PROVIDER_KEY = "sk-bench-provider-key-0123456789"  # what the replay servers expect from the gateway
SERVING_YAML = Path(__file__).resolve().parents[2] / "configs" / "serving.yaml"
LOGS = ("none", "sqlite", "postgres")  # where the gateways' decision log goes: nowhere, log.path files, log.url


@dataclass
class LoopbackConfig:
    """What every bench over the loopback stack takes (gateway, overhead, soak)."""
    router_dir: Path
    data_root: Path
    pool: Path = Path("configs/pool.yaml")
    request_timeout_s: float = 30.0

    def stack(self, **kw) -> Stack:  # kw: the rest of its GatewayBenchConfig
        return Stack(GatewayBenchConfig(**{f.name: getattr(self, f.name) for f in fields(LoopbackConfig)}, **kw))


@dataclass
class GatewayBenchConfig(LoopbackConfig):
    outputs: str = "bfcl_v1_pool_outputs_2024-08-11"
    requests: int = 400
    concurrency: int = 16
    kill: list[str] = field(default_factory=list)  # endpoints whose base_url contains one of these; "all": every one
    kill_at: int = 100  # the request number at which they go down
    kill_for_s: float = 10.0
    max_seconds: float = 300.0
    overrides: list[str] = field(default_factory=list)  # serving config key=value for the gateway
    triton: bool = False  # router_dir is a model repository: serve the router from a local tritonserver
    processes: int = 1  # gateway processes, requests round-robin across them
    state: str = "memory"  # memory | sqlite | redis: where limits and the ledger live
    workers: int = 1  # worker processes of each gateway (`switchcraft serve --workers N`: one port)
    log: str = "none"  # none | sqlite (a folder per gateway process) | postgres (one database, a server started)

    def __post_init__(self) -> None:
        if self.requests < 1 or self.concurrency < 1:
            raise ValueError("--requests and --concurrency must be at least 1")
        if self.kill and not 0 <= self.kill_at < self.requests:
            raise ValueError(f"--kill-at {self.kill_at} must be within [0, {self.requests}) to kill during the run")
        if not 0 < self.max_seconds <= 3600:
            raise ValueError("--max-seconds must be within (0, 3600]: the bench is bounded")
        if self.state not in ("memory", "sqlite", "redis"):
            raise ValueError(f"--state {self.state!r}: memory, sqlite or redis")
        if self.log not in LOGS:
            raise ValueError(f"--log {self.log!r}: none, sqlite or postgres")
        if not (1 <= self.processes <= 16 and 1 <= self.workers <= 16):
            raise ValueError("--processes and --workers must be within [1, 16]")
        if (self.processes > 1 or self.workers > 1) and self.state == "memory":
            raise ValueError("--processes or --workers > 1 needs a shared store: --state sqlite or --state redis "
                             "(memory would give each process its own limits)")


@dataclass
class Outcome:
    status: int | str  # HTTP status, or "error:<type>" when no response came
    latency_ms: float
    fallback: bool = False
    abandoned: int = 0
    retry_after: bool = False  # a 429 or 503 that said when to come back (Retry-After and retry-after-ms)


@dataclass
class GatewayBenchResult:
    config: dict
    outcomes: list[Outcome]
    wall_s: float
    metrics: dict[str, float]
    killed: list[str]
    store_ms: dict[str, float] | None = None  # one request's admit + reserve + settle, timed alone

    def summary(self) -> dict:
        out, m = self.outcomes, self.metrics
        statuses = Counter(str(o.status) for o in out)
        unavailable = [o.latency_ms for o in out if o.status == 503]
        batches, added = m.get("switchcraft_router_batch_size_count"), m.get("switchcraft_gateway_overhead_seconds_count")
        return {
            "requests": len(out), "ok": statuses.get("200", 0),
            "failed": {k: v for k, v in sorted(statuses.items()) if k != "200"},
            "lost": sum(1 for o in out if not isinstance(o.status, int) or o.status >= 500),
            "fallbacks": sum(o.fallback for o in out), "abandoned_calls": sum(o.abandoned for o in out),
            **percentiles([o.latency_ms for o in out] or [0.0], (50, 95, 99)),
            "max_503_ms": max(unavailable) if unavailable else None,
            **(percentiles(unavailable, key="p{}_503_ms") if unavailable else {"p50_503_ms": None, "p99_503_ms": None}),
            "throughput_rps": len(out) / self.wall_s if self.wall_s else 0.0,
            "circuit_opens": m.get("switchcraft_circuit_opens_total", 0.0), "busy_429": statuses.get("429", 0),
            "busy_429_with_retry_after": sum(1 for o in out if o.status == 429 and o.retry_after),
            "router_503": m.get("switchcraft_router_unavailable_total", 0.0), "router_batches": batches or 0.0,
            "mean_router_batch": m.get("switchcraft_router_batch_size_sum", 0.0) / batches if batches else None,
            "abandoned_cost_usd": m.get("switchcraft_abandoned_cost_usd_total", 0.0),
            "processes": self.config.get("processes", 1), "state": self.config.get("state", "memory"),
            "workers": self.config.get("workers", 1), "log": self.config.get("log", "none"),
            "overhead_mean_ms": 1e3 * m["switchcraft_gateway_overhead_seconds_sum"] / added if added else None,
            "store_ms": self.store_ms,
        }


def to_markdown(result: GatewayBenchResult) -> str:
    s, c = result.summary(), result.config
    kill = (f"kill {', '.join(result.killed)} at request {c['kill_at']} for {c['kill_for_s']:g} s"
            if result.killed else "no faults")
    failed = ", ".join(f"{k}: {v}" for k, v in s["failed"].items()) or "none"
    max503 = "" if s["max_503_ms"] is None else f"{s['p50_503_ms']:.1f} / {s['p99_503_ms']:.1f} / {s['max_503_ms']:.1f}"
    batch = "" if s["mean_router_batch"] is None else f"{s['mean_router_batch']:.1f}"
    store = "" if not s["store_ms"] else f"{s['store_ms']['p50']:.2f} / {s['store_ms']['p99']:.2f}"
    head = ["ok", "failed (by status)", "lost", "fallbacks", "abandoned calls", "P50 ms", "P95 ms", "P99 ms",
            "503 P50 / P99 / max ms", "req/s", "breaker opens", "429 (with Retry-After)", "mean router batch",
            "store ms / request P50 / P99"]
    row = [s["ok"], failed, s["lost"], s["fallbacks"], s["abandoned_calls"], f"{s['p50_ms']:.1f}", f"{s['p95_ms']:.1f}",
           f"{s['p99_ms']:.1f}", max503, f"{s['throughput_rps']:.1f}", f"{s['circuit_opens']:g}",
           f"{s['busy_429']} ({s['busy_429_with_retry_after']})", batch, store]
    workers = f" of {s['workers']} workers" if s["workers"] > 1 else ""
    return "\n".join([f"`switchcraft bench gateway` — {s['requests']} requests at concurrency {c['concurrency']}, "
                      f"{kill}, {s['processes']} gateway process(es){workers}, state: {s['state']}, log: {s['log']}", "",
                      *md_table(head, [row])])


def chat_body(example) -> dict:
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
             for t in example.tools]
    return {"model": "router", "messages": [{"role": m.role, "content": m.content} for m in example.messages],
            "tools": tools, "metadata": {"example_id": example.id}}


class Stack:
    """Replay servers per endpoint + the gateway process(es) (+ Triton, + Redis, + PostgreSQL): everything on
    127.0.0.1. `postgres`: a running LocalPostgres to make the log's database in (default: one started here)."""

    def __init__(self, cfg: GatewayBenchConfig, postgres=None) -> None:
        self.cfg, self.pool = cfg, load_pool(cfg.pool)
        self.recordings = read_recordings(cfg.data_root / cfg.outputs, models=[m.recording for m in self.pool.models])
        self.key, self.servers, self.gateways, self.urls = new_key(), {}, [], []
        self.triton = self.redis = self.own_postgres = None
        self.postgres, self.log_url = postgres, None
        self.work = tempfile.TemporaryDirectory(prefix="bench-gateway-")

    def __enter__(self) -> Stack:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        from data.sources import read_source

        work, cfg = Path(self.work.name), self.cfg
        # BFCL v1 queries every pool model has a recording of (a fallback can always be answered), cycled
        unique = [e for e in read_source("bfcl_v1", str(cfg.data_root / "bfcl_v1"))
                  if all(e.id in self.recordings[m.recording] for m in self.pool.models)]
        if not unique:
            raise ValueError(f"no BFCL v1 query is recorded for every pool model in {cfg.data_root}")
        self.examples = [unique[i % len(unique)] for i in range(cfg.requests)]
        unique = unique[:cfg.requests]
        for ep in dict.fromkeys(endpoint_of(m.base_url) for m in self.pool.models):
            self.servers[ep] = ReplayServer(build_state(None, unique, pool=self.pool, api_key=PROVIDER_KEY,
                                                        recordings=self.recordings)).start()
        models = [m.model_copy(update={"base_url": self.servers[endpoint_of(m.base_url)].base_url})
                  for m in self.pool.models]
        (work / "pool.yaml").write_text(yaml.safe_dump(self.pool.model_copy(update={"models": models}).model_dump(
            mode="json", exclude_none=True)))
        router = [f"router.dir={Path(cfg.router_dir).resolve()}"]
        if cfg.triton:
            from serving.triton import TritonServer

            self.triton = TritonServer(Path(cfg.router_dir) / "cpu").start()
            router += ["router.backend=triton-grpc", f"router.triton_url={self.triton.grpc_url}"]
        self.state_overrides = self._state(work)
        if cfg.log == "postgres":
            self._postgres()
        entry = {"id": "bench", "key": self.key, "role": "admin"}  # admin: the bench reads /metrics
        if cfg.state != "memory" or cfg.processes > 1:  # limits that never bite: every request uses the store
            entry["limits"] = {"requests_per_minute": 10**9, "usd_per_day": 1e9}
        env = {**os.environ, "SWITCHCRAFT_GATEWAY_KEYS": json.dumps([entry]),
               **{m.api_key_env: PROVIDER_KEY for m in self.pool.models if m.api_key_env}}
        for i in range(cfg.processes):
            port = free_port()
            self.gateways.append((spawn(serve_gateway, SERVING_YAML, [
                f"port={port}", f"upstream.pool={work / 'pool.yaml'}", "auth.keys_file=null", f"workers={cfg.workers}", *router,
                *self.state_overrides, *self._log(work, i), *cfg.overrides], env=env, log=work / f"gateway{i}.log"),
                work / f"gateway{i}.log"))
            self.urls.append(f"http://127.0.0.1:{port}")
        for (proc, log), url in zip(self.gateways, self.urls):
            wait_until(lambda u=url: httpx.get(u + "/readyz", timeout=2).status_code == 200, "the gateway", 120,
                       proc, log)

    def _state(self, work: Path) -> list[str]:
        if self.cfg.state == "redis":
            from evaluation.harness import LocalRedis

            self.redis = LocalRedis(work / "redis")
            return [f"state.redis_url={self.redis.start()}"]
        if self.cfg.state == "sqlite":
            return [f"state.path={work / 'state'}"]
        return ["state.path=null", "state.redis_url=null"]

    def _postgres(self) -> None:
        from evaluation.harness import LocalPostgres

        if self.postgres is None:
            self.postgres = self.own_postgres = LocalPostgres()
            self.postgres.start()
        self.log_url = self.postgres.create_database(f"bench_{secrets.token_hex(4)}")  # a fresh log per stack

    def _log(self, work: Path, i: int) -> list[str]:
        """Gateway process i's name in the log and where it writes: a folder of its own (as a replica on its own
        machine would), or the one PostgreSQL database every process writes."""
        name = [f"replica=gw{i}"] if self.cfg.processes > 1 else []
        if self.cfg.log == "sqlite":
            return [*name, f"log.path={work / f'log{i}'}"]
        return [*name, f"log.url={self.log_url}"] if self.cfg.log == "postgres" else name

    @property
    def url(self) -> str:
        return self.urls[0]

    def targets(self, names: list[str]) -> list[str]:
        if "all" in names:
            return list(self.servers)
        picked = [ep for ep in self.servers if any(n in ep for n in names)]
        if len(picked) < len(names) or not picked:
            raise ValueError(f"--kill {names}: the pool's endpoints are {', '.join(self.servers)}")
        return picked

    def __exit__(self, *exc) -> None:
        stop(*(proc for proc, _ in self.gateways))
        for closing in (self.redis, *(s for s in self.servers.values() if s._thread.is_alive()), self.triton,
                        self.own_postgres):
            if closing is not None:
                closing.stop()
        self.work.cleanup()


def scrape(url: str, key: str) -> dict[str, float]:
    """Sums per metric name of the gateway's /metrics (labels folded; an admin key reads them)."""
    out: dict[str, float] = Counter()
    for line in httpx.get(url + "/metrics", timeout=10, headers={"authorization": f"Bearer {key}"}).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name.split("{", 1)[0]] += float(value)
    return dict(out)


async def drive(stack: Stack, cfg: GatewayBenchConfig, targets: list[str]) -> tuple[list[Outcome], float]:
    bodies, outcomes, restarts = [chat_body(e) for e in stack.examples], [], []

    def outage() -> None:
        for ep in targets:
            stack.servers[ep].stop()
        restarts.append(threading.Timer(cfg.kill_for_s, lambda: [stack.servers[ep].start() for ep in targets]))
        restarts[-1].start()

    async def send(i: int) -> None:
        if targets and i == cfg.kill_at:
            await asyncio.to_thread(outage)
        t0 = time.perf_counter()
        try:
            r = await http.post(stack.urls[i % len(stack.urls)] + "/v1/chat/completions", json=bodies[i])
            meta = (r.json() if r.headers.get("content-type", "").startswith("application/json") else {}).get(
                "switchcraft") or {}
            outcomes.append(Outcome(r.status_code, (time.perf_counter() - t0) * 1e3, bool(meta.get("fallback")),
                                    (meta.get("abandoned") or {}).get("calls", 0),
                                    "retry-after" in r.headers and "retry-after-ms" in r.headers))
        except httpx.HTTPError as e:
            outcomes.append(Outcome(f"error:{type(e).__name__}", (time.perf_counter() - t0) * 1e3))

    limits = httpx.Limits(max_connections=cfg.concurrency, max_keepalive_connections=cfg.concurrency)
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {stack.key}"},
                                 timeout=cfg.request_timeout_s, limits=limits) as http:
        wall = await closed_loop(len(bodies), cfg.concurrency, send, time.perf_counter() + cfg.max_seconds)
    for timer in restarts:  # bring killed endpoints back before the stack shuts down
        timer.join()
    return outcomes, wall


def store_cost_ms(overrides: list[str], n: int = 300) -> dict[str, float]:
    """What the store costs one request, timed alone: admit (rate window + budget check), reserve, settle."""
    from data.yaml_config import apply_overrides
    from serving.core.state import Charge, open_state
    from serving.gateway.config import ServingConfig

    async def time_it() -> list[float]:
        store, took = open_state(ServingConfig.model_validate(apply_overrides({}, overrides)).state), []
        try:
            for i in range(n):
                t0 = time.perf_counter()
                await store.admit("store-bench", rpm=10**9, usd_per_day=1e9, now=time.time())
                res = await store.reserve("store-bench", 0.01, limit=1e9, request_id=str(i), now=time.time())
                await store.settle(res, [Charge("m", "answer", 0.001)], now=time.time())
                took.append((time.perf_counter() - t0) * 1e3)
        finally:
            await store.aclose()
        return took

    return {**percentiles(asyncio.run(time_it()), key="p{}"), "n": n}


def run_gateway_bench(cfg: GatewayBenchConfig) -> GatewayBenchResult:
    with Stack(cfg) as stack:
        targets = stack.targets(cfg.kill) if cfg.kill else []
        outcomes, wall = asyncio.run(drive(stack, cfg, targets))
        metrics: Counter = Counter()
        for url in stack.urls:
            metrics.update(scrape(url, stack.key))
        store_ms = store_cost_ms(stack.state_overrides) if cfg.state != "memory" else None
    return GatewayBenchResult(config_record(cfg), outcomes, wall, dict(metrics), targets, store_ms)


def write_results(result: GatewayBenchResult, out: Path) -> None:
    write_outputs(out, to_markdown(result), {"config": result.config, "summary": result.summary(),
                                             "killed": result.killed, "metrics": result.metrics})
