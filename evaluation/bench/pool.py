"""Pool-runner throughput against the replay server (its own process, sharing the CPUs: a lower bound) over loopback.

    switchcraft bench pool --concurrency 8 --concurrency 64 --calls 1630    # figures: docs/performance.md
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from evaluation.bench._support import serve_replay
from evaluation.harness import spawn, stop, wait_until
from evaluation.harness import free_port

MODEL = {"name": "gpt-4o-2024-08-06-FC", "model_id": "gpt-4o-2024-08-06", "api_key_env": None,
         "prompt_style": "native", "prices": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}}


def cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds of this process (pid None) or of another one, from /proc."""
    if pid is None:
        return os.times().user + os.times().system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_pool(concurrency: list[int], calls: int, data_root: Path) -> dict:
    from data.pool import Pool
    from data.pool_runner import run_pool
    from data.sources import read_source

    examples, results = read_source("bfcl_v1", str(data_root / "bfcl_v1"))[:calls], {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "pool.yaml").write_text(yaml.safe_dump({"models": [MODEL]}))
        port = free_port()
        server = spawn(serve_replay, Path(tmp) / "pool.yaml", data_root / "bfcl_v1_pool_outputs_2024-08-11",
                       data_root / "bfcl_v1", port)
        try:
            wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).raise_for_status(),
                       "the replay server", 60, server)
            for c in concurrency:
                pool = Pool.model_validate({"models": [{**MODEL, "base_url": f"http://127.0.0.1:{port}/v1",
                                                        "concurrency": c}]})
                t0, cpu0, srv0 = time.perf_counter(), cpu_s(), cpu_s(server.pid)
                s = run_pool(pool, examples, Path(tmp) / f"store_{c}.sqlite", out=Path(tmp) / f"out_{c}.parquet",
                             progress=False)
                total, cpu, srv = time.perf_counter() - t0, cpu_s() - cpu0, cpu_s(server.pid) - srv0
                if not s.complete:
                    raise RuntimeError(f"concurrency {c}: the pool run did not complete")
                r = results[c] = {"calls": s.calls_made, "calls_per_s": s.calls_made / s.seconds,
                                  "calls_per_s_with_export": s.calls_made / total, "seconds": s.seconds,
                                  "runner_cpu_ms_per_call": 1000 * cpu / s.calls_made,
                                  "server_cpu_ms_per_call": 1000 * srv / s.calls_made}
                print(f"concurrency {c:3d}: {s.calls_made} calls in {s.seconds:.2f} s = {r['calls_per_s']:.0f} calls/s "
                      f"({r['calls_per_s_with_export']:.0f} with export + decoding); CPU per call: runner "
                      f"{r['runner_cpu_ms_per_call']:.1f} ms, server {r['server_cpu_ms_per_call']:.1f} ms", flush=True)
        finally:
            stop(server)
    return {"model": MODEL["name"], "cpus": os.cpu_count(), "results": results}
