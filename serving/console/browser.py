"""Headless Chromium driven over the W3C WebDriver protocol (plain HTTP to chromedriver: no client library): the
console's browser test and its README screenshots use it, with the app on loopback (serving/loopback.py).

    with Loopback(app) as url:
        b = Browser(Path("/tmp/profile"))
        b.open(url + "/console/login"); b.type("#key", key); b.click("#login"); b.screenshot(Path("x.png"))
        b.close()

Needs Debian's `chromium` and `chromium-driver` (`apt-get install chromium chromium-driver`); `browser_missing()`
says what is not installed, or returns None.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C WebDriver key of an element reference
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",  # no network here:
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> tuple[str | None, str | None]:
    return shutil.which("chromium"), shutil.which("chromedriver")


def browser_missing() -> str | None:
    """Why no headless browser can run here (None: both are installed)."""
    if all(chromium()):
        return None
    return ("no headless browser: install Debian's chromium and chromium-driver (apt-get install chromium "
            "chromium-driver) to drive the console in one")


class Browser:
    """Headless Chromium driven by chromedriver over the W3C WebDriver protocol."""

    def __init__(self, profile: Path, window: tuple[int, int] = (1200, 1400)) -> None:
        binary, driver = chromium()
        if not (binary and driver):
            raise FileNotFoundError(browser_missing())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.driver = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.http.get("/status").json()["value"]["ready"]:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("chromedriver did not start within 30 s")
            time.sleep(0.1)
        args = FLAGS + [f"--window-size={window[0]},{window[1]}", f"--user-data-dir={profile}"]
        caps = {"browserName": "chrome", "goog:chromeOptions": {"binary": binary, "args": args}}
        self.session = self.call("POST", "", {"capabilities": {"alwaysMatch": caps}})["sessionId"]
        # a click that submits a form returns before the next page is there: finding an element waits for it
        self.call("POST", "/timeouts", {"implicit": 20_000, "pageLoad": 60_000})

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
