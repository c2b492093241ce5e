"""The operator's console against a real gateway: replayed traffic (real recorded BFCL v1 answers) with exploration
on, a real decision log and a real SQLite ledger; pages fetched over loopback with httpx.

    .venv/bin/python -m pytest -q tests/serving/console/test_pages.py

Covers the login (admin keys only, the same refusal for a wrong key and a caller's key, the cookie's flags, a
tampered cookie), every view showing the log's and the ledger's own figures, a request's trace, no key in any
log line, and `switchcraft traffic report` writing the same numbers as files. One test drives the console in a
real headless Chromium (Debian's chromium and chromium-driver, evaluation/harness.py),
keeping a screenshot of each view; it is skipped where they are not installed.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evaluation.harness import Browser, browser_missing, chromium
from serving.console.headline import money
from serving.console.views import REFUSED
from serving.app import create_app
from serving.gateway.config import ServingConfig
from switchcraft.cli import app as cli
from tests.routers import REPO
from tests.serving.gateway.helpers import POOL, pool_env
from tests.serving.helpers import (KEY, SECRET, Loopback, bearer, explorations, log_has, openai_body, post, use_keys,
                                   wait_for)

pytestmark = pytest.mark.integration
CALLER = "sk-sc-test-console-caller-0123456789"
LIMITED = "sk-sc-test-console-limited-0123456789"
A, B, TOP = "gpt-4o-mini-2024-07-18", "gemini-1.5-flash-preview-0514", "gpt-4o-2024-08-06-FC"
CASCADE = {"first": [A, B], "escalate": [TOP]}


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def served(replay, client, examples, tmp_path_factory):  # noqa: F811
    """A gateway after replayed traffic: 4 routed requests, 2 cascades, 1 request and 1 refusal of a limited key."""
    good, _ = replay
    good.state.reset()
    root = tmp_path_factory.mktemp("console")
    captured = Captured()
    logging.getLogger().addHandler(captured)
    logging.getLogger("switchcraft.gateway").setLevel(logging.DEBUG)
    with pytest.MonkeyPatch.context() as mp:
        pool_env(mp, {"id": "caller", "key": CALLER, "limits": {"usd_per_day": 5.0}},
                 {"id": "limited", "key": LIMITED, "limits": {"requests_per_minute": 1}})
        pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": good.base_url})
                                                  for m in POOL.models]})
        cfg = ServingConfig(state={"path": str(root / "state")}, log={"path": str(root / "log"), "requests": True},
                            explore={"rate": 1.0, "usd_per_day": 100.0})
        app = create_app(cfg, client=client, pool=pool)
        with Loopback(app) as url:
            answered = [post(url + "/v1/chat/completions", json=openai_body(ex), headers=bearer(CALLER), timeout=60)
                        for ex in examples[:4]]
            answered += [post(url + "/v1/chat/completions", json=openai_body(ex, switchcraft={"strategy": CASCADE}),
                              headers=bearer(CALLER), timeout=60) for ex in examples[4:6]]
            answered += [post(url + "/v1/chat/completions", json=openai_body(examples[0]), headers=bearer(LIMITED),
                              timeout=60)]
            refused = post(url + "/v1/chat/completions", json=openai_body(examples[1]), headers=bearer(LIMITED))
            assert [r.status_code for r in answered] == [200] * 7 and refused.status_code == 429
            wait_for(lambda: explorations(url, "explored", 7))
            wait_for(lambda: log_has(root / "log", 7, 7 * len(POOL.names)))
            yield {"url": url, "root": root, "answered": answered, "client": client, "log": captured}
    logging.getLogger().removeHandler(captured)


def login(url: str, key: str) -> httpx.Response:
    return httpx.post(url + "/console/login", data={"key": key, "next": "/console/traffic"})


def session(url: str) -> httpx.Client:
    r = login(url, KEY)
    assert r.status_code == 303 and r.headers["location"] == "/console/traffic"
    return httpx.Client(base_url=url, cookies={"switchcraft_console": r.cookies["switchcraft_console"]})


def shown(html: str, element_id: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', html)
    assert m, f"no #{element_id} on the page"
    return m.group(1).strip()


usd = money


def test_every_view_needs_an_admin_login_and_a_wrong_key_learns_nothing(served):
    url = served["url"]
    for path in ("/console/savings", "/console/requests", "/console/requests/abc"):
        for headers in ({}, bearer(CALLER), bearer("sk-sc-not-a-key-of-this-gateway-0123")):
            r = httpx.get(url + path, headers=headers)
            assert r.status_code == 303 and r.headers["location"].startswith("/console/login?next="), (path, headers)
    wrong, caller = login(url, "sk-sc-not-a-key-of-this-gateway-0123"), login(url, CALLER)
    assert wrong.status_code == caller.status_code == 401
    assert REFUSED in wrong.text and wrong.text == caller.text  # the same page: whether the key exists is not said
    assert "set-cookie" not in wrong.headers and "set-cookie" not in caller.headers
    assert httpx.get(url + "/console/savings", cookies={"switchcraft_console": "e30.0000"}).status_code == 303


def test_login_sets_a_signed_expiring_httponly_strict_cookie_and_no_key_is_logged(served):
    url = served["url"]
    r = login(url, KEY)
    cookie = r.headers["set-cookie"]
    flags = {f.strip().split("=")[0].lower(): f.strip() for f in cookie.split(";")}
    assert "httponly" in flags and flags["samesite"].lower() == "samesite=strict"
    assert flags["path"] == "Path=/console" and flags["max-age"] == "Max-Age=28800"
    assert KEY not in cookie and "location" in r.headers and KEY not in r.headers["location"]
    value = r.cookies["switchcraft_console"]
    ok = httpx.get(url + "/console/savings", cookies={"switchcraft_console": value})
    assert ok.status_code == 200 and ok.headers["cache-control"] == "no-store"
    payload, signature = value.split(".")
    forged = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + signature
    assert httpx.get(url + "/console/savings", cookies={"switchcraft_console": forged}).status_code == 303
    out = httpx.post(url + "/console/logout", cookies={"switchcraft_console": value})
    assert out.status_code == 303 and 'switchcraft_console=""' in out.headers["set-cookie"]
    lines = "\n".join(served["log"].lines)
    assert '"event": "console_login", "ok": true, "key": "test"' in lines
    for secret in (KEY, CALLER, LIMITED, SECRET):
        assert secret not in lines


def test_each_view_shows_the_logs_and_the_ledgers_own_figures(served, tmp_path):
    url, answered = served["url"], served["answered"]
    s = session(url)
    pages = {v: s.get(f"/console/{v}?range=24h") for v in ("savings", "quality", "traffic", "keys", "requests",
                                                             "router")}
    for name, page in pages.items():
        assert page.status_code == 200, (name, page.text[:500])
        (tmp_path / f"{name}.html").write_text(page.text)
        assert "<script" not in page.text and "http" not in page.text.split("<body>")[0]  # nothing fetched
    charged = sum(float(r.headers["x-switchcraft-cost-usd"]) for r in answered)
    assert shown(pages["savings"].text, "spent") == usd(charged)
    assert shown(pages["savings"].text, "requests") == "7" and "estimate" in pages["savings"].text
    assert "<svg" in pages["savings"].text
    # Keys: the ledger's total today is what `switchcraft spend` prints for the same store.
    spend = CliRunner().invoke(cli, ["spend", "--state", str(served["root"] / "state"), "--json"])
    assert spend.exit_code == 0, spend.output
    totals = json.loads(spend.output)["totals"]
    assert shown(pages["keys"].text, "total") == usd(sum(t["usd"] for t in totals))
    assert "__explore__" in pages["keys"].text and "limited" in pages["keys"].text
    assert shown(pages["traffic"].text, "requests") == "8"  # the 7 answered and the limited key's refusal (a log row)
    assert "rate_limit" in pages["traffic"].text  # the limited key's refusal (live counters)
    # The gateway's own part of the latency: the log's figure is taken just before each answer's header says it.
    own = [float(r.headers["x-switchcraft-overhead-ms"]) for r in answered]
    assert 0 < float(shown(pages["traffic"].text, "overhead").removesuffix(" ms").replace(",", "")) <= max(own) * 1.03
    assert "gateway overhead P99</th>" in pages["traffic"].text and "gateway P50" in pages["traffic"].text
    assert shown(pages["quality"].text, "explored") == "7"
    assert re.search(r"n = 7<", pages["quality"].text.replace("</div>", "<"))
    assert shown(pages["router"].text, "version") == served["client"].version
    # Requests: every answered request is listed and opens its trace.
    for r in answered:
        assert f'/console/requests/{r.headers["x-request-id"]}"' in pages["requests"].text
    cascade = answered[4]
    only = s.get("/console/requests?range=24h&key=limited").text
    assert answered[6].headers["x-request-id"] in only and cascade.headers["x-request-id"] not in only
    t = s.get(f"/console/requests/{cascade.headers['x-request-id']}")
    assert t.status_code == 200
    assert shown(t.text, "charged") == usd(float(cascade.headers["x-switchcraft-cost-usd"]))
    answers = t.text.split('id="answers"')[1].split("</table>")[0]
    assert A in answers and B in answers and "explore" in answers and "first" in answers
    assert s.get("/console/requests/no-such-request").status_code == 404
    assert s.get("/console/savings?ref=gpt-5").status_code == 400


def test_traffic_report_writes_the_consoles_figures(served, tmp_path):
    out = tmp_path / "report"
    r = CliRunner().invoke(cli, ["traffic", "report", "--log", str(served["root"] / "log"), "--state",
                                 str(served["root"] / "state"), "--out", str(out), "--range", "24h",
                                 "--pool", str(REPO / "configs" / "pool.yaml")])  # the pool this gateway serves
    assert r.exit_code == 0, r.output
    for name in ("report.md", "traffic.json", "savings.svg", "savings.png", "requests.png", "keys.svg"):
        assert (out / name).stat().st_size > 0, name
    n = json.loads((out / "traffic.json").read_text())
    charged = sum(float(a.headers["x-switchcraft-cost-usd"]) for a in served["answered"])
    assert n["savings"]["spent_usd"] == pytest.approx(charged) and n["traffic"]["requests"] == 8
    page = session(served["url"]).get("/console/savings?range=24h").text
    assert shown(page, "reference") == usd(n["savings"]["reference_usd"])
    md = (out / "report.md").read_text()
    assert f"- spent by the callers: {money(charged)}" in md and "n = 7 of 7 explored requests" in md
    assert Path(out / "savings.svg").read_text().startswith("<svg xmlns=")


CHROMIUM, CHROMEDRIVER = chromium()


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=browser_missing() or "")
def test_a_real_browser_logs_in_opens_every_view_and_follows_a_request_to_its_trace(served, tmp_path):
    url, answered = served["url"], served["answered"]
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(url + "/console/savings")
        assert "/console/login?next=/console/savings" in browser.url()
        browser.type("#key", CALLER)  # a caller's key is no admin key: refused, and no session
        browser.click("#login")
        assert browser.text("#error") == REFUSED and browser.call("GET", "/cookie") == []
        browser.type("#key", KEY)
        browser.click("#login")
        assert browser.wait_url(url + "/console/savings") == url + "/console/savings"
        (cookie,) = browser.call("GET", "/cookie")
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
        assert browser.call("POST", "/execute/sync", {"script": "return document.cookie", "args": []}) == ""
        charged = sum(float(r.headers["x-switchcraft-cost-usd"]) for r in answered)
        for view in ("savings", "quality", "traffic", "keys", "requests", "router"):
            browser.open(f"{url}/console/{view}?range=24h")
            assert browser.text("h1").lower().startswith(view[:4]), view
            browser.screenshot(tmp_path / f"{view}.png")
            if view == "savings":
                assert browser.text("#spent") == usd(charged) and browser.text("#requests") == "7"
            if view == "traffic":
                assert browser.text("#requests") == "8"
        rid = answered[4].headers["x-request-id"]
        browser.open(f"{url}/console/requests?range=24h")
        browser.click(f'a[href="/console/requests/{rid}"]')
        assert browser.text("#rid") == rid and A in browser.text("#answers")
        browser.screenshot(tmp_path / "trace.png")
    finally:
        browser.close()
    for name in ("savings", "quality", "traffic", "keys", "requests", "router", "trace"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_a_decision_log_the_views_say_so_and_keys_and_router_still_work(client, monkeypatch):  # noqa: F811
    use_keys(monkeypatch)
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    with Loopback(create_app(ServingConfig(), client=client, pool=POOL)) as url:
        s = session(url)
        for view in ("savings", "quality", "traffic", "requests"):
            page = s.get(f"/console/{view}")
            assert page.status_code == 200 and "log.path and log.url are null" in shown(page.text, "message"), view
        assert s.get("/console/keys").status_code == 200 and shown(s.get("/console/keys").text, "total") == "$0.00"
        assert shown(s.get("/console/router").text, "version") == client.version
        assert s.get("/console/nothing").status_code == 404 and s.get("/console/savings?range=2y").status_code == 400


def test_the_router_view_shows_a_reload_and_the_last_learn_comparison(served, exported, tmp_path):
    url, learned = served["url"], tmp_path / "learned"
    shutil.copytree(exported[0], learned / "router_onnx")  # the router in service, as `switchcraft learn` leaves one
    ci = {"mean": 0.9, "low": 0.85, "high": 0.94}
    (learned / "learn.json").write_text(json.dumps({"comparison": {
        "n": 240, "router_version": "learned-v2", "in_service": {"accuracy_consensus": {**ci, "mean": 0.8},
                                                                 "usd_per_million": 600.0},
        "new": {"accuracy_consensus": ci, "usd_per_million": 417.0}}}))
    r = httpx.post(url + "/v1/admin/reload", json={"dir": str(learned / "router_onnx")}, headers=bearer(KEY))
    assert r.status_code == 200, r.text
    page = session(url).get("/console/router").text
    assert "1 ok, 0 failed" in page and str(learned / "router_onnx") in page
    table = page.split('id="learn"')[1].split("</table>")[0]
    assert "learned learned-v2" in table and "0.900" in table and "417" in table and "0.800" in table


def test_the_router_view_rolls_back_to_the_router_served_before(served, exported, tmp_path):
    """Two reloads, then the Router view's rollback serves the first again; the API's rollback too; another site's
    post and a caller key are refused and change nothing."""
    url = served["url"]
    first, second = tmp_path / "first", tmp_path / "second"
    for where in (first, second):
        shutil.copytree(exported[0], where)
        for body in ({"dir": str(where)},):
            assert httpx.post(url + "/v1/admin/reload", json=body, headers=bearer(KEY)).status_code == 200
    s = session(url)
    assert shown(s.get("/console/router").text, "rollback").startswith(f"Roll back to the router served before ({first})")
    refused = s.post("/console/router/rollback", headers={"origin": "https://evil.example"})
    assert refused.status_code == 403 and str(second) in s.get("/console/router").text
    assert httpx.post(url + "/v1/admin/rollback", headers=bearer(CALLER)).status_code == 403
    rolled = s.post("/console/router/rollback", follow_redirects=False)
    assert rolled.status_code == 303 and rolled.headers["location"] == "/console/router"
    page = s.get("/console/router").text
    assert f'<td class="l">{first}</td>' in page  # the directory in service is the first again
    again = httpx.post(url + "/v1/admin/rollback", headers=bearer(KEY))  # the API: to what served before `first`
    assert again.status_code in (200, 409) and (again.status_code == 409 or again.json()["rolled_back"])


def test_a_gateway_that_never_reloaded_has_nothing_to_roll_back(client, monkeypatch):  # noqa: F811
    use_keys(monkeypatch)
    for m in POOL.models:
        monkeypatch.setenv(m.api_key_env, SECRET)
    with Loopback(create_app(ServingConfig(), client=client, pool=POOL)) as url:
        s = session(url)
        assert "No earlier router to roll back to" in s.get("/console/router").text
        assert s.post("/console/router/rollback").status_code == 409
        r = httpx.post(url + "/v1/admin/rollback", headers=bearer(KEY))
        assert r.status_code == 409 and r.json()["error"]["type"] == "no_earlier_router"

@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=browser_missing() or "")
def test_a_real_browser_searches_pages_and_reads_a_timeline_the_traffic_tables_and_the_router(served, exported,
                                                                                           tmp_path):
    url, answered, client = served["url"], served["answered"], served["client"]
    learned = tmp_path / "learned"
    shutil.copytree(exported[0], learned / "router_onnx")
    info = json.loads((learned / "router_onnx" / "router.json").read_text())
    delta = {"mean": 0.02, "low": -0.01, "high": 0.05}
    info["rollout"] = {"verdict": "roll_out", "why": "neither less accurate nor dearer beyond the paired intervals",
                       "scoring": "consensus", "delta_accuracy": delta,
                       "delta_usd_per_million": {"mean": -120.0, "low": -200.0, "high": -40.0}}
    (learned / "router_onnx" / "router.json").write_text(json.dumps(info))
    r = httpx.post(url + "/v1/admin/reload", json={"dir": str(learned / "router_onnx")}, headers=bearer(KEY))
    assert r.status_code == 200, r.text
    live = r.json()["router_version"]  # router.json changed (its rollout): another version than the one before
    ci = {"mean": 0.9, "low": 0.85, "high": 0.94}
    (learned / "learn.json").write_text(json.dumps({"router_onnx": str(learned / "router_onnx"), "comparison": {
        "n": 240, "router_version": live, "in_service": {"accuracy_consensus": ci, "usd_per_million": 600.0},
        "new": {"accuracy_consensus": ci, "usd_per_million": 480.0}}}))
    browser = Browser(tmp_path / "profile", window=(1440, 1400))
    try:
        browser.open(url + "/console/login?next=/console/requests")
        browser.type("#key", KEY)
        browser.click("#login")
        assert browser.wait_url(url + "/console/requests") == url + "/console/requests"
        rid = answered[4].headers["x-request-id"]
        browser.type("#q", rid[:10])  # the start of a request id
        browser.click("#filter")
        wait_for(lambda: "q=" in browser.url())
        rows = browser.call("POST", "/execute/sync", {"script": "return [...document.querySelectorAll("
                                                                "'#requests a')].map(a => a.textContent)", "args": []})
        assert rows == [rid[:12]]
        browser.click(f'a[href="/console/requests/{rid}"]')
        assert browser.text("#rid") == rid and browser.text("h2") == "The request"  # the request first
        assert '"messages"' in browser.text("#text")
        returned = browser.text("#returned")
        assert answered[4].headers["x-switchcraft-model"] in returned and "returned" in returned
        counts = browser.call("POST", "/execute/sync", {"script": "return [...document.querySelectorAll("
                                                                  "'#distinct td.count')].map(t => +t.textContent)",
                                                        "args": []})
        calls = browser.call("POST", "/execute/sync", {"script": "return document.querySelectorAll('#answers tr')"
                                                                 ".length - 1", "args": []})
        assert sum(counts) <= calls and len(counts) < calls  # identical answers are one row with a count
        browser.screenshot(tmp_path / "trace.png")
        browser.open(f"{url}/console/requests?range=24h&explored=no")
        rows = browser.text("#requests").split("\n")[1:]  # every served request was explored: only refusals are not
        assert rows and all(" 429 " in row for row in rows), rows
        browser.open(f"{url}/console/traffic?range=24h")
        labels = browser.call("POST", "/execute/sync", {"script": "return [...document.querySelectorAll("
                                                                  "'svg text[text-anchor=end]')].map(t => "
                                                                  "[t.textContent, t.getBBox().x])", "args": []})
        assert all(x >= 0 for _, x in labels) and any(TOP in text and B in text for text, _ in labels)
        assert "caller" in browser.text("#spend-key") and A in browser.text("#spend-model")
        assert "ms" in browser.text("#latency-time")
        browser.open(f"{url}/console/quality?range=24h")
        assert "log.requests: false" not in browser.text("main")
        browser.open(f"{url}/console/router?range=24h")
        assert browser.text("#version") == live != client.version
        assert "in service" in browser.text("#learn-new") and "replaced" in browser.text("#learn-in_service")
        assert browser.text("#verdict") == "roll_out" and "+0.020 [-0.010, +0.050]" in browser.text("#rollout")
        version_row = browser.text("#versions").splitlines()[1]
        # the version that served these requests, with its consensus quality and cost, is no longer in service
        assert version_row.startswith(client.version) and "% – " in version_row and "$" in version_row
        assert not version_row.endswith("in service")
        browser.screenshot(tmp_path / "router.png")
    finally:
        browser.close()


def test_an_empty_gateway_says_how_to_send_a_request_and_quality_how_to_explore(replay, client, examples,  # noqa: F811
                                                                               tmp_path):
    good, _ = replay
    with pytest.MonkeyPatch.context() as mp:
        pool_env(mp, {"id": "caller", "key": CALLER})
        pool = POOL.model_copy(update={"models": [m.model_copy(update={"base_url": good.base_url})
                                                  for m in POOL.models]})
        cfg = ServingConfig(state={"path": str(tmp_path / "state")}, log={"path": str(tmp_path / "log"),
                                                                          "requests": True})
        with Loopback(create_app(cfg, client=client, pool=pool)) as url:
            s = session(url)
            for view in ("savings", "requests", "traffic"):
                said = shown(s.get(f"/console/{view}").text, "message")
                assert said.startswith("no requests yet") and "send one with curl http://127.0.0.1:8080/v1/chat/" \
                    "completions -H &#39;Authorization: Bearer &lt;a caller key&gt;&#39;" in said, view
            ok = post(url + "/v1/chat/completions", json=openai_body(examples[0]), headers=bearer(CALLER), timeout=60)
            assert ok.status_code == 200
            wait_for(lambda: log_has(tmp_path / "log", 1, 1))
            page = s.get("/console/quality").text
            assert shown(page, "explored") == "0"
            assert "log.requests: false" not in page
            assert "Exploration is off (explore.rate: 0)" in page and "explore.usd_per_day" in page
