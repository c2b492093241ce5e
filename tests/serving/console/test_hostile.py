"""The console's login and logout against hostile callers: oversized and endless bodies, another site's forms, a
copied cookie after logout, a key-guessing loop, `next` paths that leave /console, and arbitrary input.

    .venv/bin/python -m pytest -q tests/serving/console/test_hostile.py

Real parts: the gateway app served by uvicorn on loopback (raw sockets where a client must stop sending midway,
httpx otherwise), its SQLite state store shared by two gateway processes' apps; httpx's in-process ASGI transport
where a test must count how much of a body the gateway pulled, or speak from several client addresses.
"""

from __future__ import annotations

import posixpath
import re
import socket
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from evaluation.harness import Browser, browser_missing, chromium
from serving.console.guard import LoginThrottle
from serving.console.session import SECRET_ENV
from serving.console.login import REFUSED, console_path
from serving.app import create_app
from serving.gateway.config import ConsoleSettings, ServingConfig
from evaluation.harness import LocalRedis
from tests.routers import REPO
from tests.serving.gateway.helpers import POOL
from tests.serving.helpers import AUTH, KEY, SECRET, Loopback, use_keys

pytestmark = pytest.mark.integration
COOKIE = "switchcraft_console"
WRONG = "sk-sc-not-a-key-of-this-gateway-0123"
GENEROUS = {"login_failures_per_address": 1_000_000, "login_failures_total": 1_000_000}


def gateway_app(client, monkeypatch, console: dict | None = None, **cfg):
    use_keys(monkeypatch)
    monkeypatch.setenv(SECRET_ENV, "console-secret-shared-by-replicas-0123")
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    return create_app(ServingConfig(console={**GENEROUS, **(console or {})}, **cfg), client=client, pool=POOL)


@pytest.fixture(scope="module")
def gateway(client):
    """The URL of a gateway whose login allows any number of failures (the throttle has its own tests)."""
    with pytest.MonkeyPatch.context() as mp, Loopback(gateway_app(client, mp)) as url:
        yield url


def login(url: str, key: str = KEY, nxt: str = "/console/traffic", **kw) -> httpx.Response:
    return httpx.post(url + "/console/login", data={"key": key, "next": nxt}, **kw)


def raw_post(url: str, headers: list[str], body: bytes = b"", timeout_s: float = 10.0) -> tuple[int, str]:
    """(status, response) of a POST /console/login written on a socket: `body` is sent, nothing more."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        head = ["POST /console/login HTTP/1.1", f"host: {host}:{port}",
                "content-type: application/x-www-form-urlencoded", *headers]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        answer = b""
        while b"</html>" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    text = answer.decode("utf-8", "replace")
    return int(text.split(" ", 2)[1]), text


# --- 1. the body is bounded before it is read ---------------------------------------------------------------
def test_a_declared_length_over_the_bound_is_refused_unread(gateway):
    status, text = raw_post(gateway, ["content-length: 400000000"])  # headers only: the body never comes
    assert status == 413 and "console.max_login_bytes" in text and "400,000,000 bytes" in text
    assert "connection: close" in text.lower()


def test_a_chunked_body_is_refused_once_it_passes_the_bound(gateway):
    chunk = b"400\r\n" + b"k" * 1024 + b"\r\n"
    status, text = raw_post(gateway, ["transfer-encoding: chunked"], chunk * 8)  # 8 KiB sent, never ended
    assert status == 413 and "passed 4,096 bytes" in text and "console.max_login_bytes" in text


@pytest.mark.parametrize("declared", [True, False])
def test_the_gateway_pulls_no_more_of_an_endless_body_than_the_bound(client, monkeypatch, declared):
    app, pulled = gateway_app(client, monkeypatch), []

    async def endless():  # 40 MiB on offer, 1 KiB at a time
        for _ in range(40 * 1024):
            pulled.append(1024)
            yield b"k" * 1024

    async def go() -> httpx.Response:
        headers = {"content-type": "application/x-www-form-urlencoded"}
        if declared:
            headers["content-length"] = str(40 * 2**20)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://console.test") as c:
            return await c.post("/console/login", content=endless(), headers=headers)

    r = anyio.run(go)
    assert r.status_code == 413 and "console.max_login_bytes" in r.text
    assert sum(pulled) <= (0 if declared else 4096 + 1024), f"{sum(pulled):,} bytes pulled"


def test_a_form_that_is_not_urlencoded_is_refused_with_415(gateway):
    r = httpx.post(gateway + "/console/login", json={"key": KEY})
    assert r.status_code == 415 and "application/x-www-form-urlencoded" in r.text and COOKIE not in r.headers.get(
        "set-cookie", "")


# --- 2. another site's form ---------------------------------------------------------------------------------
@pytest.mark.parametrize("headers", [{"origin": "https://evil.example"}, {"origin": "null"},
                                     {"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"},
                                     {"referer": "https://evil.example/page"},
                                     {"sec-fetch-site": "cross-site", "origin": "SELF"}])
def test_another_sites_form_can_neither_log_in_nor_log_out(gateway, headers):
    headers = {k: v.replace("SELF", gateway) for k, v in headers.items()}
    planted = login(gateway, headers=headers)
    assert planted.status_code == 403 and "another site" in planted.text and "set-cookie" not in planted.headers
    cookie = login(gateway).cookies[COOKIE]
    out = httpx.post(gateway + "/console/logout", headers=headers, cookies={COOKIE: cookie})
    assert out.status_code == 403 and "set-cookie" not in out.headers
    assert httpx.get(gateway + "/console/keys", cookies={COOKIE: cookie}).status_code == 200  # still logged in


@pytest.mark.parametrize("headers", [{"origin": "SELF"}, {"sec-fetch-site": "same-origin"},
                                     {"sec-fetch-site": "same-origin", "origin": "null"}, {"referer": "SELF/console/x"},
                                     {}])
def test_the_gateways_own_pages_and_non_browsers_log_in_and_out(gateway, headers):
    headers = {k: v.replace("SELF", gateway) for k, v in headers.items()}
    r = login(gateway, headers=headers)
    assert r.status_code == 303 and r.headers["location"] == "/console/traffic"
    out = httpx.post(gateway + "/console/logout", headers=headers, cookies={COOKIE: r.cookies[COOKIE]})
    assert out.status_code == 303 and out.headers["location"] == "/console/login"


def test_an_origin_the_operator_names_may_post_the_forms(client, monkeypatch):
    app = gateway_app(client, monkeypatch, console={"origins": ["https://ops.example.com"]})
    with Loopback(app) as url:
        assert login(url, headers={"origin": "https://ops.example.com:443"}).status_code == 303
        assert login(url, headers={"origin": "https://ops.example.com.evil.example"}).status_code == 403
    for bad in ("ops.example.com", "https://ops.example.com/console"):  # never silently matching nothing
        with pytest.raises(ValueError, match=r"console.origins\[0\]: .* is not an origin; write scheme://host"):
            ServingConfig(console={"origins": [bad]})


CHROMIUM, CHROMEDRIVER = chromium()


def foreign_site(gateway: str) -> FastAPI:
    """Another site's page (another origin: another port) with forms posting to the gateway's console."""
    app = FastAPI()

    @app.get("/")
    async def page() -> HTMLResponse:
        return HTMLResponse(f"""<html><body>
<form method="post" action="{gateway}/console/logout"><button id="out" type="submit">win a prize</button></form>
<form method="post" action="{gateway}/console/login"><input type="hidden" name="key" value="{KEY}">
<input type="hidden" name="next" value="/console/keys"><button id="in" type="submit">another prize</button></form>
</body></html>""")
    return app


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=browser_missing() or "")
def test_in_a_real_browser_another_sites_forms_are_refused_and_logout_revokes_the_cookie(gateway, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(gateway + "/console/login")
        browser.type("#key", KEY)
        browser.click("#login")
        assert browser.wait_url(gateway + "/console/savings") == gateway + "/console/savings"
        (cookie,) = browser.call("GET", "/cookie")
        with Loopback(foreign_site(gateway)) as foreign:
            for button in ("#out", "#in"):
                browser.open(foreign + "/")
                browser.click(button)
                assert "another site" in browser.text("#error") and browser.url() == gateway + "/console/" + (
                    "logout" if button == "#out" else "login")
                assert [c["value"] for c in browser.call("GET", "/cookie")] == [cookie["value"]]
        browser.open(gateway + "/console/keys")
        assert browser.text("h1").lower().startswith("keys")  # still logged in, as itself
        browser.click("header button")  # the console's own "log out"
        assert browser.wait_url(gateway + "/console/login") == gateway + "/console/login"
        assert browser.call("GET", "/cookie") == []
    finally:
        browser.close()
    copied = httpx.get(gateway + "/console/keys", cookies={COOKIE: cookie["value"]})
    assert copied.status_code == 303 and copied.headers["location"] == "/console/login?next=/console/keys"


# --- 3. logout revokes the session ---------------------------------------------------------------------------
@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_copy_of_the_cookie_is_refused_after_logout_by_every_replica(client, monkeypatch, tmp_path, store):
    redis = LocalRedis(tmp_path / "redis") if store == "redis" else None
    state = {"redis_url": redis.start()} if redis else {"path": str(tmp_path / "state")}
    try:  # two gateway apps over one store, with one console secret
        with Loopback(gateway_app(client, monkeypatch, state=state)) as a, \
                Loopback(gateway_app(client, monkeypatch, state=state)) as b:
            cookie = login(a).cookies[COOKIE]
            other = login(a).cookies[COOKIE]
            for url in (a, b):
                assert httpx.get(url + "/console/keys", cookies={COOKIE: cookie}).status_code == 200
            out = httpx.post(b + "/console/logout", cookies={COOKIE: cookie})
            assert out.status_code == 303 and f'{COOKIE}=""' in out.headers["set-cookie"]
            for url in (a, b):
                refused = httpx.get(url + "/console/keys", cookies={COOKIE: cookie})
                assert refused.status_code == 303 and refused.headers["location"] == "/console/login?next=/console/keys"
                assert httpx.get(url + "/console/keys", cookies={COOKIE: other}).status_code == 200  # its own session
    finally:
        if redis:
            redis.stop()


def test_without_its_state_store_a_session_is_neither_trusted_nor_silently_kept_after_logout(client, monkeypatch,
                                                                                             tmp_path):
    redis = LocalRedis(tmp_path / "redis")
    try:
        with Loopback(gateway_app(client, monkeypatch, state={"redis_url": redis.start()})) as url:
            cookie = login(url).cookies[COOKIE]
            redis.kill()
            page = httpx.get(url + "/console/savings", cookies={COOKIE: cookie}, timeout=30)
            assert page.status_code == 503 and "the session cannot be checked now" in page.text
            assert httpx.get(url + "/console/router", headers=AUTH, timeout=30).status_code == 200  # a key still opens it
            out = httpx.post(url + "/console/logout", cookies={COOKIE: cookie}, timeout=30)
            assert out.status_code == 503 and f'{COOKIE}=""' in out.headers["set-cookie"]
            assert "could not record the logout" in out.text and "stays valid until" in out.text
    finally:
        redis.stop()


# --- 4. failed logins are throttled ----------------------------------------------------------------------------
def test_failed_logins_past_the_allowance_get_429_with_retry_after(client, monkeypatch):
    app = gateway_app(client, monkeypatch, console={"login_failures_per_address": 3, "login_failures_total": 50})
    with Loopback(app) as url:
        assert [login(url, WRONG).status_code for _ in range(3)] == [401] * 3
        for key in (WRONG, KEY):  # even the right key waits: a guesser cannot tell it found one
            r = login(url, key)
            assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
            assert "Too many failed logins" in r.text and "set-cookie" not in r.headers
        metrics = httpx.get(url + "/metrics", headers=AUTH).text
        assert re.search(r'switchcraft_auth_rejections_total\{key="",reason="console_throttled"\} 2\.0', metrics)


def test_failures_from_every_address_together_are_bounded_too(client, monkeypatch):
    app = gateway_app(client, monkeypatch, console={"login_failures_per_address": 2, "login_failures_total": 5})

    async def attempt(address: str, key: str) -> httpx.Response:
        transport = httpx.ASGITransport(app, client=(address, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as c:
            return await c.post("/console/login", data={"key": key, "next": "/console/keys"})

    async def go() -> list[int]:
        return [(await attempt(f"10.0.0.{i}", WRONG)).status_code for i in range(7)] + [
            (await attempt("10.0.0.99", KEY)).status_code]

    assert anyio.run(go) == [401] * 5 + [429] * 3


def test_the_throttle_forgets_failures_after_a_minute_and_a_success_clears_an_address():
    t = LoginThrottle(per_address=2, total=3)
    assert [t.admit("a", 100.0), t.admit("a", 110.0)] == [0.0, 0.0]
    assert t.admit("a", 120.0) == pytest.approx(40.0)  # the failure at 100 s leaves the minute at 160 s
    assert t.admit("a", 160.5) == 0.0
    t.succeeded("a", 160.5)
    assert t.admit("a", 161.0) == 0.0 and t.admit("b", 161.0) == 0.0
    assert t.admit("c", 162.0) == pytest.approx(8.0)  # the three of all: 110, 161 (a), 161 (b)
    assert len(t.by_address) <= 3


# --- 5. next stays in the console -----------------------------------------------------------------------------
LEAVING = ["/console/../v1/models", "/console/..", "/console/./../metrics", "//evil.example/console/x",
           "/console//evil.example", "/console/\\evil.example", "/console/%2e%2e/v1/models", "/console/%2F%2Fevil",
           "/console/..%2fv1", "https://evil.example/console/savings", "/console/savings?x=//evil", "/consolex",
           "/console/", "", "/console/a/../../v1", "/console/\tsavings", "/console/savings#x"]


@pytest.mark.parametrize("nxt", LEAVING)
def test_a_next_path_that_leaves_the_console_goes_to_savings(gateway, nxt):
    assert console_path(nxt) == "/console/savings"
    r = login(gateway, nxt=nxt)
    assert r.status_code == 303 and r.headers["location"] == "/console/savings"


def test_a_plain_console_path_is_kept(gateway):
    for nxt in ("/console/requests/0123abcd", "/console/traffic", "/console/requests/req-1_2.json"):
        assert login(gateway, nxt=nxt).headers["location"] == nxt


# --- 6. arbitrary input ----------------------------------------------------------------------------------------
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"), max_size=80)
CONTENT_TYPES = st.one_of(st.sampled_from(["application/x-www-form-urlencoded", "application/x-www-form-urlencoded; "
                                           "charset=latin-1", "multipart/form-data; boundary=x", "application/json",
                                           "text/plain", ""]), HEADER_TEXT)
NEXTS = st.one_of(st.sampled_from(LEAVING), st.text(max_size=60), st.builds(lambda t: "/console/" + t,
                                                                              st.text(max_size=40)))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(body=st.one_of(st.binary(max_size=6000), st.builds(lambda k, n: f"key={k}&next={n}".encode("utf-8", "replace"),
                                                           st.sampled_from([KEY, WRONG, ""]), NEXTS)),
       form=st.none() | st.tuples(st.sampled_from([KEY, WRONG, "", "\x00" * 3]), NEXTS),
       content_type=CONTENT_TYPES,
       headers=st.dictionaries(st.sampled_from(["origin", "sec-fetch-site", "referer", "cookie", "x-forwarded-proto",
                                                "authorization", "host"]), HEADER_TEXT, max_size=3))
@example(body=b"", form=(KEY, "/console/../v1/models"), content_type="application/x-www-form-urlencoded",
         headers={"cookie": "switchcraft_console=\xe9.\xe9"})
def test_hostile_login_and_logout_input_never_gets_a_5xx_or_leaves_the_console(gateway, body, form, content_type,
                                                                              headers):
    if form is not None:  # a well-formed form, so the key check and the redirect are reached too
        body = httpx.QueryParams({"key": form[0], "next": form[1]}).__str__().encode()
        content_type = "application/x-www-form-urlencoded"
    sent = {k: v.encode("latin-1") for k, v in {**headers, "content-type": content_type}.items()}
    if "host" in sent and not sent["host"].strip():
        sent.pop("host")
    for path in ("/console/login", "/console/logout"):
        try:
            r = httpx.post(gateway + path, content=body, headers=sent, timeout=30)
        except httpx.LocalProtocolError:  # a header httpx itself will not send
            return
        assert r.status_code < 500 and "Traceback" not in r.text, (path, r.status_code, r.text[:300])
        if r.is_redirect:
            where = r.headers["location"]
            assert where.startswith("/console/") and posixpath.normpath(where) == where, where
        assert r.headers.get("cache-control") == "no-store"


@pytest.mark.parametrize("cookie", ["\xe9.\xe9", "e30.\xff" + "0" * 63, ".", "a.b.c", "%00%00", "x" * 3000])
def test_a_page_given_a_hostile_cookie_goes_to_the_login_page(gateway, cookie):
    r = httpx.get(gateway + "/console/keys", headers={"cookie": f"{COOKIE}={cookie}".encode("latin-1")})
    assert r.status_code == 303 and r.headers["location"] == "/console/login?next=/console/keys"


def test_the_doc_states_every_console_bound_with_its_setting_and_default():
    doc = " ".join((REPO / "docs" / "console.md").read_text().split())
    for name, field in ConsoleSettings.model_fields.items():
        assert f"`console.{name}`" in doc, name
        default = field.get_default(call_default_factory=True)
        assert f"`console.{name}`, default {default:,}" in doc if isinstance(default, int) else f"default `{default}`" in doc
    assert REFUSED in doc
