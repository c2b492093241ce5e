"""Run the replay endpoint: in a thread (tests, benchmarks) or in the foreground (CLI).

switchcraft pool replay-server --outputs ../shared/data/bfcl_v1_pool_outputs_2024-08-11 --port 8099

with ReplayServer(state) as srv:       # binds 127.0.0.1 on a free port
    httpx.post(srv.base_url + "/chat/completions", json=...)
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import uvicorn

from data.pool import Pool
from data.replay import Faults, ReplayState, create_app
from data.replay.recordings import ExampleIndex, Recordings, read_recordings
from data.schema import Example


def build_state(
    outputs: str | Path | None,
    examples: list[Example],
    *,
    pool: Pool | None = None,
    models: list[str] | None = None,
    faults: Faults | None = None,
    api_key: str | None = None,
    recordings: Recordings | None = None,
) -> ReplayState:
    """Recordings (only the pool's, when a pool is given) and the pool's model ids as aliases.

    `recordings` already read (tests share one copy) are used instead of reading `outputs`.
    """
    aliases: dict[str, str] = {}
    if pool is not None:
        ids = [m.endpoint_model for m in pool.models]
        # An id two pool models share (a plain and an -FC variant) stays unaliased: use /models/<name>/v1.
        aliases = {
            m.endpoint_model: m.recording for m in pool.models if ids.count(m.endpoint_model) == 1
        }
        models = models or [m.recording for m in pool.models]
    if recordings is None:
        recordings = read_recordings(outputs, models=models)
    elif models:
        recordings = {m: recordings[m] for m in models}
    return ReplayState(
        recordings,
        ExampleIndex(examples),
        aliases=aliases,
        faults=faults or Faults(),
        api_key=api_key,
    )


class ReplayServer:
    """A real uvicorn server on loopback in a background thread.

    `stop()` then `start()` takes it down and brings it back on the same port (an endpoint outage)."""

    def __init__(self, state: ReplayState, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state, self.host, self.port = state, host, port
        self._app = create_app(state)

    def start(self) -> ReplayServer:
        # Connection errors from injected drops are expected; keep them out of test output.
        config = uvicorn.Config(
            self._app, host=self.host, port=self.port, log_level="critical", access_log=False
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="replay-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"replay server did not start on {self.host}:{self.port} (port in use?)")
            time.sleep(0.01)
        sock = self._server.servers[0].sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> ReplayServer:
        return self.start()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def model_url(self, recording: str) -> str:
        return f"http://{self.host}:{self.port}/models/{recording}/v1"

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(
    state: ReplayState, *, host: str = "127.0.0.1", port: int = 8099, log_level: str = "warning"
) -> None:
    logging.getLogger("uvicorn.error").setLevel(log_level.upper())
    uvicorn.run(create_app(state), host=host, port=port, log_level=log_level, access_log=False)
