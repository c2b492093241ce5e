"""What the benches share: servers in processes of their own, a closed-loop load, percentiles, the written table.

    proc = spawn(serve_gateway, Path("configs/serving.yaml"), ["port=8123"], env={...}, log=work / "gw.log")
    wait_until(lambda: httpx.get(url + "/readyz").status_code == 200, "the gateway", 120, proc, log)
    stop(proc)                                # spawn, wait_until and stop: evaluation/harness.py

A server runs the function `switchcraft serve` calls, never the CLI: a bench imports only the stages to its left.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any


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
