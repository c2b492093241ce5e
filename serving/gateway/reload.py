"""The router the gateway serves, replaceable while it serves: a new router directory without dropping requests.

    slot = RouterSlot(client, make_batcher, pool.names, metrics, load=lambda path: client_from(cfg.router, path))
    decision = await slot.batcher.route(messages, tools)     # always the router in service now
    await slot.reload("runs/learned/router_onnx")            # POST /v1/admin/reload (admin key) or SIGHUP

A reload loads the new directory off the event loop (in the slot's loader thread), checks that it routes only
to pool models, then swaps:
requests that arrive after the swap route with the new router, those already queued finish with the old one
(its batcher drains before it is closed). A directory that fails to load changes nothing (the error is the
answer). Every decision carries `router_version`, and the decision log keeps it per request.

Several workers (`switchcraft serve --workers N`): a reload reaches one of them, so the slot also has a
`SharedRouter`, a small file in the serving run's own folder naming the directory last reloaded. The worker that
reloaded writes it; every worker reads it once a second (`follow`) and, when another worker wrote it since,
loads that directory too (the learn verdict was checked where the reload was asked). A worker that starts later
(uvicorn replaces one that died) loads it before it serves.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from serving.client import RouterClient

log = logging.getLogger("switchcraft.gateway")
DRAIN_S = 30.0
HISTORY = 16  # routers remembered for rollbacks


class RolloutRefused(ValueError):
    """The router's own learn verdict says to keep the router in service."""


def rollout_refusal(path: str | Path) -> str | None:
    """Why `path` must not replace the router in service (router.json `rollout.verdict` "keep"), else None. A
    router.json that cannot be read is left to the loader, which says what is wrong with it."""
    try:
        rollout = json.loads((Path(path) / "router.json").read_text()).get("rollout") or {}
    except (OSError, ValueError, AttributeError):
        return None
    if rollout.get("verdict") != "keep":
        return None
    return (f"switchcraft learn advised to keep the router in service: the learned router is {rollout.get('why')}; "
            "reload with {\"dir\": …, \"force\": true} to serve it anyway")


def client_from(settings, path: str | Path) -> RouterClient:
    """A router client for `path` with the serving config's router settings (backend, threads, rule, …)."""
    r = settings
    return RouterClient.from_dir(path, backend=r.backend, url=r.triton_url, int8=r.int8, threads=r.threads,
                                 timeout_s=r.timeout_s, max_batch_size=r.max_batch_size, pad_multiple=r.pad_multiple,
                                 spin=r.spin, rule=r.rule, lam=r.lam, novelty=r.novelty)


def _libc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _libc_trim()


def release_memory() -> None:
    """Give a closed router's memory back to the system (glibc keeps freed pages in its arenas otherwise)."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


def check_models(client: RouterClient, pool_names: list[str]) -> None:
    unknown = [m for m in client.models if m not in pool_names]
    if unknown:
        raise ValueError(f"the router routes to {unknown}, which the pool file does not list; add them to the pool")


class SharedRouter:
    """The router directory the workers of one serving run serve: `path` holds {"dir", "id"} of the last reload in
    any of them (written whole: a new file renamed over it); `changed` says a directory to load when the file
    names a reload this worker has not seen."""

    def __init__(self, path: str | Path, every_s: float = 1.0) -> None:
        self.path, self.every_s, self.seen = Path(path), every_s, None

    def publish(self, where: str) -> None:
        self.seen = uuid.uuid4().hex
        new = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        new.write_text(json.dumps({"dir": where, "id": self.seen}))
        os.replace(new, self.path)

    def changed(self) -> str | None:
        try:
            record = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        if record["id"] == self.seen:
            return None
        self.seen = record["id"]
        return record["dir"]


class RouterSlot:
    """The router in service and its batcher. Routers are loaded in one thread of the slot's and run in another:
    glibc gives each thread that allocates its own arena and keeps what is freed there, so a router loaded and run
    by whichever of anyio's 40 worker threads was free left its memory spread over up to 8 arenas a core, and
    every reload added ~30 MB that never came back (`switchcraft bench soak`: RSS +21% over ten reloads). In two
    threads of its own, each new router reuses what its predecessor freed."""

    def __init__(self, client: RouterClient, make_batcher: Callable[[RouterClient, ThreadPoolExecutor], object],
                 pool_names: list[str], metrics, *, load: Callable[[str], RouterClient],
                 default_dir: str | None = None) -> None:
        check_models(client, pool_names)
        self.client, self.make_batcher, self.pool_names = client, make_batcher, pool_names
        self.loader = ThreadPoolExecutor(1, thread_name_prefix="switchcraft-router-load")
        self.runner = ThreadPoolExecutor(1, thread_name_prefix="switchcraft-router")
        self.batcher = make_batcher(client, self.runner)
        self.metrics, self.load, self.default_dir = metrics, load, default_dir
        self.lock = asyncio.Lock()
        self.draining: set[asyncio.Task] = set()
        self.loaded_from = default_dir
        self.loaded: RouterClient | None = None  # a client this slot loaded (closed when replaced); not the first
        self.shared: SharedRouter | None = None  # several workers: the reloads they share
        self.history: list[str] = []  # the directories served before, oldest first (a rollback takes the last)

    async def reload(self, path: str | None = None, *, force: bool = False, publish: bool = True,
                     remember: bool = True) -> dict:
        """Serve the router in `path` (default: the configured router.dir) from now on; ValueError /
        FileNotFoundError (nothing changed) when it cannot be served, RolloutRefused when `switchcraft learn` said
        to keep the router in service (router.json `rollout`) and `force` is not given. `publish`: tell the other
        workers (when there are: `shared`). `remember`: the router replaced goes on `history` (a rollback's
        does not)."""
        path = path or self.default_dir
        if not path:
            raise ValueError("no router directory to reload: give {\"dir\": …}")
        if not force:
            refused = rollout_refusal(path)
            if refused:
                self.metrics.router_reloads.labels(outcome="refused").inc()
                log.warning(json.dumps({"event": "router_reload", "ok": False, "dir": str(path), "error": refused}))
                raise RolloutRefused(refused)
        async with self.lock:
            t0 = time.perf_counter()
            try:
                new = await asyncio.get_running_loop().run_in_executor(self.loader, self.load, path)
                check_models(new, self.pool_names)
            except Exception as e:  # noqa: BLE001 - any directory that cannot be served is refused, not a 500
                # A malformed router.json (`models: null`) or a truncated ONNX file fails inside the loader with
                # TypeError, KeyError or onnxruntime's own errors, not only ValueError.
                message = str(e) if isinstance(e, (FileNotFoundError, ValueError)) else f"{type(e).__name__}: {e}"
                self.metrics.router_reloads.labels(outcome="failed").inc()
                log.error(json.dumps({"event": "router_reload", "ok": False, "dir": str(path), "error": message}))
                raise ValueError(message) from None
            old_client, old_batcher, owned = self.client, self.batcher, self.loaded
            if remember and self.loaded_from and self.loaded_from != str(path):
                self.history = [*self.history[-(HISTORY - 1):], self.loaded_from]
            self.client, self.batcher, self.loaded_from, self.loaded = new, self.make_batcher(new, self.runner), str(path), new
            task = asyncio.get_running_loop().create_task(self._drain(old_batcher, owned))
            self.draining.add(task)
            task.add_done_callback(self.draining.discard)
            self.metrics.router_reloads.labels(outcome="ok").inc()
            if self.shared is not None and publish:
                self.shared.publish(str(path))
            out = {"router_version": new.version, "previous_version": old_client.version, "dir": str(path),
                   "load_ms": round((time.perf_counter() - t0) * 1e3, 1)}
            log.info(json.dumps({"event": "router_reload", "ok": True, **out}))
            return out

    async def rollback(self) -> dict:
        """Serve the router served before the last reload again (forced: it was in service); ValueError when there
        is none (nothing reloaded since start) or it can no longer be loaded (it stays on `history`)."""
        if not self.history:
            raise ValueError("no earlier router to roll back to: nothing was reloaded since the gateway started")
        previous = self.history[-1]
        out = await self.reload(previous, force=True, remember=False)
        self.history.pop()
        return {**out, "rolled_back": True}

    async def catch_up(self) -> None:
        """Load the router another worker reloaded since this one last looked (a failure is logged and counted by
        `reload`; this worker keeps its router)."""
        where = self.shared.changed() if self.shared is not None else None
        if where is not None:
            try:
                await self.reload(where, force=True, publish=False)
            except ValueError:
                pass

    async def follow(self) -> None:
        """`catch_up` every `shared.every_s`, until cancelled (the app's shutdown)."""
        while True:
            await asyncio.sleep(self.shared.every_s)
            await self.catch_up()

    async def _drain(self, batcher, owned: RouterClient | None) -> None:
        """The old router finishes what it admitted, then closes (the client too, when this slot loaded it; the
        one the gateway was built with belongs to its caller) and its memory goes back to the system."""
        deadline = time.monotonic() + DRAIN_S
        while getattr(batcher, "admitted", 0) > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await batcher.aclose()
        if owned is not None:
            owned.close()
        del batcher, owned
        await asyncio.get_running_loop().run_in_executor(self.loader, release_memory)

    async def aclose(self) -> None:
        for task in list(self.draining):
            await task
        await self.batcher.aclose()
        self.loader.shutdown(wait=False)
        self.runner.shutdown(wait=False)
