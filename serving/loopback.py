"""An ASGI app served by uvicorn on 127.0.0.1 in a background thread: for the replayed learning loop, the
benchmarks, the console's screenshots and the tests.

    with Loopback(app) as url:                        # a free port; url = "http://127.0.0.1:PORT"
        httpx.get(url + "/healthz")
    server = Loopback(app, port=8090); server.start()  # a given port; server.stop() ends it

`switchcraft serve` runs its own uvicorn (serving/gateway/server.py); this is for processes that also drive
the app they serve.
"""

from __future__ import annotations

import threading
import time

import uvicorn


class Loopback:
    def __init__(self, app, *, port: int = 0, start_timeout_s: float = 20.0, log_level: str = "critical") -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.start_timeout_s = start_timeout_s
        self.url = ""

    def start(self) -> str:
        """Serve; the base URL once the server accepts connections (TimeoutError when it does not in time)."""
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                port = self.server.config.port
                raise TimeoutError(f"the app did not start on 127.0.0.1:{port or 'a free port'} within "
                                   f"{self.start_timeout_s:g} s (port in use?)")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
