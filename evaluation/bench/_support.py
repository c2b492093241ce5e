"""What the benches share: servers in processes of their own, a closed-loop load, percentiles, the written table.

    proc = spawn(serve_gateway, Path("configs/serving.yaml"), ["port=8123"], env={...}, log=work / "gw.log")
    wait_until(lambda: httpx.get(url + "/readyz").status_code == 200, "the gateway", 120, proc, log)
    stop(proc)

A server runs the function `switchcraft serve` calls, never the CLI: a bench imports only the stages to its left.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any


def _child(target: Callable[..., Any], args: tuple, env: dict[str, str] | None, log: str | None) -> None:
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    out = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(out, 2)
    sys.stdout, sys.stderr = os.fdopen(1, "w", buffering=1), os.fdopen(2, "w", buffering=1)
    target(*args)


def spawn(target: Callable[..., Any], *args: Any, env: dict[str, str] | None = None,
          log: Path | None = None) -> multiprocessing.Process:
    """`target(*args)` (a module-level function) in a fresh interpreter: `env` its whole environment (default:
    this one's), stdout and stderr appended to `log` (default: discarded)."""
    # Not a daemon: a gateway with --workers starts processes of its own (a daemon may not); the benches stop
    # theirs when they end (`stop`: terminate, then kill).
    proc = multiprocessing.get_context("spawn").Process(target=_child, daemon=False,
                                                        args=(target, args, env, str(log) if log else None))
    proc.start()
    return proc


def stop(*procs: multiprocessing.Process) -> None:
    """Terminate the processes, the last started first; kill one still running after 15 s."""
    for p in reversed(procs):
        p.terminate()
        p.join(15)
        if p.exitcode is None:
            p.kill()
            p.join(5)


def log_tail(log: Path | None) -> str:
    return ": " + log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""


def wait_until(check: Callable[[], Any], what: str, timeout_s: float, proc: multiprocessing.Process | None = None,
               log: Path | None = None) -> float:
    """Seconds until `check()` is true (raising: not yet); RuntimeError when `proc` exits first, TimeoutError
    after `timeout_s`."""
    t0 = time.monotonic()
    while (took := time.monotonic() - t0) < timeout_s:
        if proc is not None and proc.exitcode is not None:
            raise RuntimeError(f"{what} exited with status {proc.exitcode}{log_tail(log)}")
        try:
            if check():
                return took
        except Exception:  # not listening yet
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} was not ready after {timeout_s:.0f} s{log_tail(log)}")


async def closed_loop(n: int, concurrency: int, send: Callable[[int], Awaitable[Any]],
                      deadline: float | None = None) -> float:
    """`concurrency` workers await `send(i)` for i = 0 … n-1, each taking the next i when its last is done, none
    started after `deadline` (a perf_counter time); the wall seconds."""
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            if deadline is not None and time.perf_counter() >= deadline:
                return
            await send(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


def percentiles(xs, qs=(50, 99), key: str = "p{}_ms", ndigits: int | None = None) -> dict[str, float]:
    """{key.format(q): the q-th percentile of xs}, numpy's linear interpolation."""
    import numpy as np

    values = np.percentile(np.asarray(xs, dtype=float), qs)
    return {key.format(q): float(v) if ndigits is None else round(float(v), ndigits) for q, v in zip(qs, values)}


def md_table(head: list[str], rows: list[list], align: str = "") -> list[str]:
    """A markdown table's lines; `align`: 'l' or 'r' a column (default: no alignment)."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align or "l" * len(head)) + "|"
    return ["| " + " | ".join(head) + " |", rule, *("| " + " | ".join(map(str, r)) + " |" for r in rows)]


def config_record(cfg) -> dict:
    """A config dataclass as JSON-ready values (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}


def write_json(path: str | Path, record: Any, indent: int = 2) -> None:
    """`record` as JSON at `path` (numpy scalars as numbers, anything else unknown as its text), folders made."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=indent, default=_plain))


def write_outputs(out: Path, markdown: str, record: dict, indent: int = 1) -> None:
    """The table at `out`, the record beside it as .json."""
    write_json(out.with_suffix(".json"), record, indent)
    out.write_text(markdown.rstrip("\n") + "\n")


def _plain(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else str(x)  # a numpy scalar, else its text


def serve_gateway(config: Path, overrides: list[str]) -> None:
    """The chat gateway, as `switchcraft serve --config CONFIG OVERRIDES…` runs it (one process, or `workers=N`)."""
    from serving.app import serve_from

    serve_from(config, overrides)


def serve_replay(pool_yaml: Path, outputs: Path, bfcl_v1: Path, port: int) -> None:
    """The replay server over recorded BFCL v1 outputs, for the pool file's models."""
    from data.pool import load_pool
    from data.replay.serve import build_state, serve
    from data.sources import read_source

    serve(build_state(outputs, read_source("bfcl_v1", bfcl_v1), pool=load_pool(pool_yaml)), port=port)
