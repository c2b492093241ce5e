"""What the benches share: a free port, and a server run as a function in a process of its own.

    proc = spawn(serve_gateway, Path("configs/serving.yaml"), ["port=8123"], env={...}, log=work / "gw.log")
    proc.poll(); proc.terminate(); proc.wait(timeout=15)

A bench measures a server from outside, so the server runs in another process; that process calls the serving
function itself (the same one `switchcraft serve` calls), never the CLI, so a bench depends only on the stages
to its left (tests/test_layering.py checks `-m` commands as imports).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _child(target: Callable[..., Any], args: tuple, env: dict[str, str] | None, log: str | None) -> None:
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if log else os.open(os.devnull, os.O_WRONLY)
    os.dup2(out, 1)
    os.dup2(out, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    target(*args)


class Spawned:
    """A function running in a fresh interpreter (multiprocessing's spawn), with the part of subprocess.Popen's
    interface the benches use: pid, poll, returncode, terminate, kill, wait."""

    def __init__(self, target: Callable[..., Any], args: tuple, env: dict[str, str] | None, log: Path | None):
        ctx = multiprocessing.get_context("spawn")
        # Not a daemon: a gateway with --workers starts processes of its own (a daemon may not); the benches stop
        # theirs when they end (terminate, then kill).
        self.process = ctx.Process(target=_child, args=(target, args, env, str(log) if log else None), daemon=False)
        self.process.start()
        self.pid = self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def terminate(self) -> None:
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"process {self.pid}", timeout)
        return self.process.exitcode


def spawn(target: Callable[..., Any], *args: Any, env: dict[str, str] | None = None, log: Path | None = None) -> Spawned:
    """Run `target(*args)` in a process of its own: `env` its whole environment (default: this one's), stdout and
    stderr appended to `log` (default: discarded). `target` must be importable (a module-level function)."""
    return Spawned(target, args, env, log)


def serve_gateway(config: Path, overrides: list[str]) -> None:
    """The chat gateway, as `switchcraft serve --config CONFIG OVERRIDES…` runs it (one process, or `workers=N`)."""
    from serving.app import serve_from

    serve_from(config, overrides)


def serve_mcp_gateway(config: Path) -> None:
    """The MCP gateway over HTTP, as `switchcraft mcp serve --config CONFIG` runs it."""
    import uvicorn

    from serving.gateway.server import uvicorn_config
    from serving.mcp import McpGateway, http_app, load_mcp_config

    cfg = load_mcp_config(config)
    uvicorn.Server(uvicorn_config(http_app(McpGateway.from_config(cfg)), cfg)).run()  # the header deadline too


def serve_replay(pool_yaml: Path, outputs: Path, bfcl_v1: Path, port: int) -> None:
    """The replay server over recorded BFCL v1 outputs, for the pool file's models."""
    from data.pool import load_pool
    from data.replay.serve import build_state, serve
    from data.sources import read_source

    serve(build_state(outputs, read_source("bfcl_v1", bfcl_v1), pool=load_pool(pool_yaml)), port=port)
