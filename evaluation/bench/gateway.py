"""Load test of the whole gateway stack on loopback, optionally with an upstream endpoint killed mid-run.

    switchcraft bench gateway --router runs/bfcl_v1/router_onnx -n 400 -c 16 --kill api.openai.com --kill-at 100 --kill-for 10
    switchcraft bench gateway --processes 2 --state redis     # two gateway processes sharing one real Redis
    switchcraft bench gateway --workers 2 --state sqlite      # one `switchcraft serve --workers 2` (one port)

Starts one replay server per upstream endpoint of the pool (real recorded BFCL
v1 answers; killing an endpoint stops its server and brings it back on the
same port), the gateway itself as `switchcraft serve` in its own process (so it
does not share a GIL with the load), optionally Triton for the router, then
sends real OpenAI-compatible chat requests (`model: "router"`) at a given
concurrency. Bounded: at most `requests` requests, none started after
`max_seconds`, each with a client timeout. Reports requests ok / failed by
status, lost requests (a 5xx or no response), fallbacks, abandoned calls,
latency P50/P95/P99, the slowest 503 and throughput.

`--processes N` starts N gateway processes (requests round-robin across them)
and `--state` says where their limits and ledger live: `memory` (each its own,
in memory), `sqlite` (one file, shared on this machine) or `redis` (a real
redis-server started here, shared). The bench key then has limits (too high to
bite) so every request admits, reserves and settles in the store, and the table
adds what the store costs one request: admit + reserve + settle, timed alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
import yaml

from data.pool import Pool, load_pool
from data.replay.recordings import read_recordings
from data.replay.serve import ReplayServer, build_state
from serving.core.auth import new_key
from serving.gateway.breaker import endpoint_of
from evaluation.harness import free_port
from evaluation.bench._support import Spawned, serve_gateway, spawn

PROVIDER_KEY = "sk-bench-provider-key-0123456789"  # what the replay servers expect from the gateway
SERVING_YAML = Path(__file__).resolve().parents[2] / "configs" / "serving.yaml"


@dataclass
class GatewayBenchConfig:
    router_dir: Path
    data_root: Path
    outputs: str = "bfcl_v1_pool_outputs_2024-08-11"
    pool: Path = Path("configs/pool.yaml")
    requests: int = 400
    concurrency: int = 16
    kill: list[str] = field(default_factory=list)  # endpoints whose base_url contains one of these; "all": every one
    kill_at: int = 100  # the request number at which they go down
    kill_for_s: float = 10.0
    max_seconds: float = 300.0
    request_timeout_s: float = 30.0
    overrides: list[str] = field(default_factory=list)  # serving config key=value for the gateway
    triton: bool = False  # router_dir is a model repository: serve the router from a local tritonserver
    processes: int = 1  # gateway processes, requests round-robin across them
    state: str = "memory"  # memory | sqlite | redis: where limits and the ledger live
    workers: int = 1  # worker processes of each gateway (`switchcraft serve --workers N`: one port)

    def __post_init__(self) -> None:
        if self.requests < 1 or self.concurrency < 1:
            raise ValueError("--requests and --concurrency must be at least 1")
        if self.kill and not 0 <= self.kill_at < self.requests:
            raise ValueError(f"--kill-at {self.kill_at} must be within [0, {self.requests}) to kill during the run")
        if not 0 < self.max_seconds <= 3600:
            raise ValueError("--max-seconds must be within (0, 3600]: the bench is bounded")
        if self.state not in ("memory", "sqlite", "redis"):
            raise ValueError(f"--state {self.state!r}: memory, sqlite or redis")
        if not 1 <= self.processes <= 16:
            raise ValueError("--processes must be within [1, 16]")
        if not 1 <= self.workers <= 16:
            raise ValueError("--workers must be within [1, 16]")
        if (self.processes > 1 or self.workers > 1) and self.state == "memory":
            raise ValueError("--processes or --workers > 1 needs a shared store: --state sqlite or --state redis "
                             "(memory would give each process its own limits)")


@dataclass
class Outcome:
    status: int | str  # HTTP status, or "error:<type>" when no response came
    latency_ms: float
    fallback: bool = False
    abandoned: int = 0
    answered_by: str | None = None
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
        lat = np.array([o.latency_ms for o in self.outcomes]) if self.outcomes else np.zeros(1)
        unavailable = [o.latency_ms for o in self.outcomes if o.status == 503]
        statuses = Counter(str(o.status) for o in self.outcomes)
        return {
            "requests": len(self.outcomes), "ok": statuses.get("200", 0),
            "failed": {k: v for k, v in sorted(statuses.items()) if k != "200"},
            "lost": sum(1 for o in self.outcomes if not isinstance(o.status, int) or o.status >= 500),
            "fallbacks": sum(o.fallback for o in self.outcomes), "abandoned_calls": sum(o.abandoned for o in self.outcomes),
            "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95)),
            "p99_ms": float(np.percentile(lat, 99)), "max_503_ms": max(unavailable) if unavailable else None,
            "p50_503_ms": float(np.percentile(unavailable, 50)) if unavailable else None,
            "p99_503_ms": float(np.percentile(unavailable, 99)) if unavailable else None,
            "throughput_rps": len(self.outcomes) / self.wall_s if self.wall_s else 0.0,
            "circuit_opens": self.metrics.get("switchcraft_circuit_opens_total", 0.0),
            "busy_429": statuses.get("429", 0),
            "busy_429_with_retry_after": sum(1 for o in self.outcomes if o.status == 429 and o.retry_after),
            "router_503": self.metrics.get("switchcraft_router_unavailable_total", 0.0),
            "router_batches": self.metrics.get("switchcraft_router_batch_size_count", 0.0),
            "mean_router_batch": (self.metrics.get("switchcraft_router_batch_size_sum", 0.0)
                                  / self.metrics["switchcraft_router_batch_size_count"])
            if self.metrics.get("switchcraft_router_batch_size_count") else None,
            "abandoned_cost_usd": self.metrics.get("switchcraft_abandoned_cost_usd_total", 0.0),
            "processes": self.config.get("processes", 1), "state": self.config.get("state", "memory"),
            "workers": self.config.get("workers", 1),
            "overhead_mean_ms": 1e3 * self.metrics["switchcraft_gateway_overhead_seconds_sum"]
            / self.metrics["switchcraft_gateway_overhead_seconds_count"]
            if self.metrics.get("switchcraft_gateway_overhead_seconds_count") else None,  # what the gateway added
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
    workers = f" of {s['workers']} workers" if s["workers"] > 1 else ""
    return "\n".join([
        f"`switchcraft bench gateway` — {s['requests']} requests at concurrency {c['concurrency']}, {kill}, "
        f"{s['processes']} gateway process(es){workers}, state: {s['state']}",
        "",
        "| ok | failed (by status) | lost | fallbacks | abandoned calls | P50 ms | P95 ms | P99 ms | 503 P50 / P99 / max ms "
        "| req/s | breaker opens | 429 (with Retry-After) | mean router batch | store ms / request P50 / P99 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {s['ok']} | {failed} | {s['lost']} | {s['fallbacks']} | {s['abandoned_calls']} | {s['p50_ms']:.1f} | "
        f"{s['p95_ms']:.1f} | {s['p99_ms']:.1f} | {max503} | {s['throughput_rps']:.1f} | {s['circuit_opens']:g} | "
        f"{s['busy_429']} ({s['busy_429_with_retry_after']}) | {batch} | {store} |",
    ])


def bench_examples(data_root: Path, recordings: dict, pool: Pool, n: int) -> list:
    """BFCL v1 queries every pool model has a recording of (so a fallback can always be answered), cycled to n."""
    from data.sources import read_source

    examples = [e for e in read_source("bfcl_v1", str(data_root / "bfcl_v1"))
                if all(e.id in recordings[m.recording] for m in pool.models)]
    if not examples:
        raise ValueError(f"no BFCL v1 query is recorded for every pool model in {data_root}")
    return [examples[i % len(examples)] for i in range(n)]


def chat_body(example) -> dict:
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
             for t in example.tools]
    return {"model": "router", "messages": [{"role": m.role, "content": m.content} for m in example.messages],
            "tools": tools, "metadata": {"example_id": example.id}}


class Stack:
    """Replay servers per endpoint + the gateway process (+ Triton): everything on 127.0.0.1."""

    def __init__(self, cfg: GatewayBenchConfig) -> None:
        self.cfg = cfg
        self.pool = load_pool(cfg.pool)
        self.recordings = read_recordings(cfg.data_root / cfg.outputs, models=[m.recording for m in self.pool.models])
        self.key = new_key()
        self.servers: dict[str, ReplayServer] = {}
        self.work = tempfile.TemporaryDirectory(prefix="bench-gateway-")
        self.gateways: list[tuple[Spawned, int, Path]] = []  # (process, port, log file)
        self.triton = None
        self.redis = None

    def __enter__(self) -> Stack:
        self.examples = bench_examples(self.cfg.data_root, self.recordings, self.pool, self.cfg.requests)
        unique = list({e.id: e for e in self.examples}.values())
        for m in self.pool.models:
            ep = endpoint_of(m.base_url)
            if ep not in self.servers:
                self.servers[ep] = ReplayServer(build_state(None, unique, pool=self.pool, api_key=PROVIDER_KEY,
                                                            recordings=self.recordings)).start()
        models = [m.model_copy(update={"base_url": self.servers[endpoint_of(m.base_url)].base_url}) for m in self.pool.models]
        work = Path(self.work.name)
        (work / "pool.yaml").write_text(yaml.safe_dump(self.pool.model_copy(update={"models": models}).model_dump(
            mode="json", exclude_none=True)))
        router = [f"router.dir={Path(self.cfg.router_dir).resolve()}"]
        if self.cfg.triton:
            from serving.triton import TritonServer

            self.triton = TritonServer(Path(self.cfg.router_dir) / "cpu").start()
            router += ["router.backend=triton-grpc", f"router.triton_url={self.triton.grpc_url}"]
        self.state_overrides = self._state(work)
        entry = {"id": "bench", "key": self.key, "role": "admin"}  # admin: the bench reads /metrics
        if self.cfg.state != "memory" or self.cfg.processes > 1:  # limits that never bite: every request uses the store
            entry["limits"] = {"requests_per_minute": 10**9, "usd_per_day": 1e9}
        env = {**os.environ, "SWITCHCRAFT_GATEWAY_KEYS": json.dumps([entry])}
        env.update({m.api_key_env: PROVIDER_KEY for m in self.pool.models if m.api_key_env})
        for i in range(self.cfg.processes):
            port = free_port()
            log = work / f"gateway{i}.log"
            proc = spawn(serve_gateway, SERVING_YAML, [f"port={port}", f"upstream.pool={work / 'pool.yaml'}",
                         "auth.keys_file=null", f"workers={self.cfg.workers}", *router, *self.state_overrides,
                         *self.cfg.overrides], env=env, log=log)
            self.gateways.append((proc, port, log))
        for i in range(self.cfg.processes):
            self._wait_ready(i)
        return self

    def _state(self, work: Path) -> list[str]:
        if self.cfg.state == "redis":
            from evaluation.harness import LocalRedis

            self.redis = LocalRedis(work / "redis")
            return [f"state.redis_url={self.redis.start()}"]
        if self.cfg.state == "sqlite":
            return [f"state.path={work / 'state'}"]
        return ["state.path=null", "state.redis_url=null"]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for _, port, _ in self.gateways]

    @property
    def url(self) -> str:
        return self.urls[0]

    def _wait_ready(self, i: int, timeout_s: float = 120.0) -> None:
        proc, url = self.gateways[i][0], self.urls[i]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the gateway exited ({proc.returncode}): {self.log_tail(i)}")
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"the gateway was not ready after {timeout_s:.0f} s: {self.log_tail(i)}")

    def log_tail(self, i: int = 0) -> str:
        log = self.gateways[i][2]
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""


    def targets(self, names: list[str]) -> list[str]:
        if "all" in names:
            return list(self.servers)
        picked = [ep for ep in self.servers if any(n in ep for n in names)]
        if len(picked) < len(names) or not picked:
            raise ValueError(f"--kill {names}: the pool's endpoints are {', '.join(self.servers)}")
        return picked

    def __exit__(self, *exc) -> None:
        for proc, _, _ in self.gateways:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.redis is not None:
            self.redis.stop()
        for server in self.servers.values():
            if server._thread.is_alive():
                server.stop()
        if self.triton is not None:
            self.triton.stop()
        self.work.cleanup()


def scrape(url: str, key: str) -> dict[str, float]:
    """Sums per metric name of the gateway's /metrics (labels folded; an admin key reads them)."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10, headers={"authorization": f"Bearer {key}"}).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            base = name.split("{", 1)[0]
            out[base] = out.get(base, 0.0) + float(value)
    return out


async def drive(stack: Stack, cfg: GatewayBenchConfig, targets: list[str]) -> tuple[list[Outcome], float]:
    bodies = [chat_body(e) for e in stack.examples]
    outcomes: list[Outcome] = []
    started, next_i = time.perf_counter(), 0
    deadline = started + cfg.max_seconds
    restarts: list[threading.Timer] = []

    def outage() -> None:
        for ep in targets:
            stack.servers[ep].stop()
        timer = threading.Timer(cfg.kill_for_s, lambda: [stack.servers[ep].start() for ep in targets])
        timer.start()
        restarts.append(timer)

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal next_i
        while next_i < len(bodies) and time.perf_counter() < deadline:
            i, next_i = next_i, next_i + 1
            if targets and i == cfg.kill_at:
                await asyncio.to_thread(outage)
            t0 = time.perf_counter()
            try:
                r = await http.post(stack.urls[i % len(stack.urls)] + "/v1/chat/completions", json=bodies[i])
                meta = (r.json() if r.headers.get("content-type", "").startswith("application/json") else {}).get(
                    "switchcraft") or {}
                outcomes.append(Outcome(r.status_code, (time.perf_counter() - t0) * 1e3, bool(meta.get("fallback")),
                                        (meta.get("abandoned") or {}).get("calls", 0), meta.get("answered_by"),
                                        "retry-after" in r.headers and "retry-after-ms" in r.headers))
            except httpx.HTTPError as e:
                outcomes.append(Outcome(f"error:{type(e).__name__}", (time.perf_counter() - t0) * 1e3))

    limits = httpx.Limits(max_connections=cfg.concurrency, max_keepalive_connections=cfg.concurrency)
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {stack.key}"},
                                 timeout=cfg.request_timeout_s, limits=limits) as http:
        await asyncio.gather(*(worker(http) for _ in range(cfg.concurrency)))
    wall = time.perf_counter() - started
    for timer in restarts:  # bring killed endpoints back before the stack shuts down
        timer.join()
    return outcomes, wall


def store_cost_ms(overrides: list[str], n: int = 300) -> dict[str, float]:
    """What the store costs one request, timed alone: admit (rate window + budget check), reserve, settle."""
    from serving.gateway.config import ServingConfig
    from serving.core.state import Charge, open_state
    from data.yaml_config import apply_overrides

    settings = ServingConfig.model_validate(apply_overrides({}, overrides)).state

    async def time_it() -> list[float]:
        store, took = open_state(settings), []
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

    took = np.array(asyncio.run(time_it()))
    return {"p50": float(np.percentile(took, 50)), "p99": float(np.percentile(took, 99)), "n": n}


def run_gateway_bench(cfg: GatewayBenchConfig) -> GatewayBenchResult:
    with Stack(cfg) as stack:
        targets = stack.targets(cfg.kill) if cfg.kill else []
        outcomes, wall = asyncio.run(drive(stack, cfg, targets))
        metrics: dict[str, float] = {}
        for url in stack.urls:
            for name, value in scrape(url, stack.key).items():
                metrics[name] = metrics.get(name, 0.0) + value
        store_ms = store_cost_ms(stack.state_overrides) if cfg.state != "memory" else None
    return GatewayBenchResult({k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
                              outcomes, wall, metrics, targets, store_ms)


def write_results(result: GatewayBenchResult, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_markdown(result) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"config": result.config, "summary": result.summary(),
                                                    "killed": result.killed, "metrics": result.metrics}, indent=1))
