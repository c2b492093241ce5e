"""Benchmark: pool-runner throughput against the replay server over loopback HTTP.

    switchcraft bench pool                                # concurrency 8 and 64, 1,630 calls each
    switchcraft bench pool --concurrency 8 --concurrency 64 --calls 800 --data-root ../shared/data

The replay server runs in its own process (uvicorn, 127.0.0.1, no injected
faults or latency), so the figure is what the runner itself sustains: request
building, HTTP, response parsing, fsynced store commits, and the final export
with decoding. Each concurrency level gets one model (`gpt-4o-2024-08-06-FC`,
native tool calls) with that many workers and a fresh store. On a 2-core
machine the server shares the CPUs with the runner, so this is a lower bound.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from evaluation.harness import free_port
from evaluation.bench._support import Spawned, serve_replay, spawn

MODEL = {
    "name": "gpt-4o-2024-08-06-FC",
    "model_id": "gpt-4o-2024-08-06",
    "api_key_env": None,
    "prompt_style": "native",
    "prices": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
}


def start_replay_server(pool_yaml: Path, data_root: Path, port: int) -> Spawned:
    proc = spawn(serve_replay, pool_yaml, data_root / "bfcl_v1_pool_outputs_2024-08-11", data_root / "bfcl_v1", port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the replay server exited with status {proc.returncode}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).raise_for_status()
            return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("replay server did not come up within 60 s")


def _cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds of this process (pid None) or of another one, from /proc."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_pool(concurrency: list[int], calls: int, data_root: Path) -> dict:
    from data.pool import Pool
    from data.pool_runner import run_pool
    from data.sources import read_source

    examples = read_source("bfcl_v1", str(data_root / "bfcl_v1"))[:calls]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        pool_yaml = Path(tmp) / "pool.yaml"
        pool_yaml.write_text(yaml.safe_dump({"models": [MODEL]}))
        port = free_port()
        server = start_replay_server(pool_yaml, data_root, port)
        try:
            for c in concurrency:
                pool = Pool.model_validate(
                    {
                        "models": [
                            {**MODEL, "base_url": f"http://127.0.0.1:{port}/v1", "concurrency": c}
                        ]
                    }
                )
                t0, cpu0, srv0 = time.perf_counter(), _cpu_s(), _cpu_s(server.pid)
                summary = run_pool(
                    pool,
                    examples,
                    Path(tmp) / f"store_{c}.sqlite",
                    out=Path(tmp) / f"out_{c}.parquet",
                    progress=False,
                )
                total = time.perf_counter() - t0
                cpu, srv = _cpu_s() - cpu0, _cpu_s(server.pid) - srv0
                assert summary.complete, f"concurrency {c}: run incomplete"
                results[c] = {
                    "calls": summary.calls_made,
                    "calls_per_s": summary.calls_made / summary.seconds,
                    "calls_per_s_with_export": summary.calls_made / total,
                    "seconds": summary.seconds,
                    "runner_cpu_ms_per_call": 1000 * cpu / summary.calls_made,
                    "server_cpu_ms_per_call": 1000 * srv / summary.calls_made,
                }
                print(
                    f"concurrency {c:3d}: {summary.calls_made} calls in {summary.seconds:.2f} s = "
                    f"{results[c]['calls_per_s']:.0f} calls/s ({results[c]['calls_per_s_with_export']:.0f} "
                    f"with export + decoding); CPU per call: runner "
                    f"{results[c]['runner_cpu_ms_per_call']:.1f} ms, server {results[c]['server_cpu_ms_per_call']:.1f} ms",
                    flush=True,
                )
        finally:
            server.terminate()
            server.wait(timeout=10)
    return {"model": MODEL["name"], "cpus": os.cpu_count(), "results": results}


def main(concurrency: list[int], calls: int, data_root: Path, out: Path) -> dict:
    """`switchcraft bench pool`: run the benchmark, print a line per concurrency level, write `out` (JSON)."""
    res = bench_pool(concurrency, calls, Path(data_root))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")
    return res
