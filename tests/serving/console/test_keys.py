"""The console's Keys view: the state store's keys with their limits and spend; an admin creates a key (shown
once), changes its limits and revokes it through POST forms that need an admin session and refuse another site.

    .venv/bin/python -m pytest -q tests/serving/console/test_keys.py

Real parts: two gateway apps on loopback over one SQLite state file (two replicas), httpx, and a real headless
Chromium (Debian's chromium and chromium-driver, evaluation/harness.py; that test is skipped without them).
"""

from __future__ import annotations

import logging
import re
import time

import httpx
import pytest

from evaluation.harness import Browser, browser_missing, chromium
from serving.app import create_app
from serving.console.session import SECRET_ENV
from serving.gateway.config import ServingConfig
from tests.serving.gateway.helpers import POOL, pool_env
from tests.serving.helpers import KEY, Loopback, bearer

pytestmark = pytest.mark.integration
COOKIE = "switchcraft_console"
CALLER = "sk-sc-test-console-keys-caller-0123456"
REFRESH_S = 0.3
CHEAP = "gpt-4o-mini-2024-07-18"
ROUTE = {"messages": [{"role": "user", "content": "weather in Paris?"}]}
CHROMIUM, CHROMEDRIVER = chromium()


def replica(client, monkeypatch, tmp_path):
    """A gateway app over the test's SQLite state file; its keys: the admin test key and a caller's (seeds)."""
    pool_env(monkeypatch, {"id": "caller", "key": CALLER})
    monkeypatch.setenv(SECRET_ENV, "console-secret-shared-by-replicas-0123")
    return create_app(ServingConfig(state={"path": str(tmp_path / "state")}, auth={"refresh_s": REFRESH_S}),
                      client=client, pool=POOL)


def signed_in(url: str) -> dict[str, str]:
    r = httpx.post(url + "/console/login", data={"key": KEY, "next": "/console/keys"})
    assert r.status_code == 303, r.text
    return {COOKIE: r.cookies[COOKIE]}


def new_key(page: str) -> str:
    m = re.search(r'<pre id="new-key">(sk-sc-[^<]+)</pre>', page)
    assert m, "no new key on the page"
    return m.group(1)


def route(url: str, key: str) -> int:
    return httpx.post(url + "/v1/route", json=ROUTE, headers=bearer(key), timeout=30).status_code


FORM = {"id": "acme", "role": "caller", "tenant": "acme", "rpm": "", "usd_per_day": "5", "models": CHEAP}


def test_the_forms_need_an_admin_session_and_refuse_another_sites_page(client, monkeypatch, tmp_path):
    with Loopback(replica(client, monkeypatch, tmp_path)) as url:
        cookies = signed_in(url)
        for headers, kw in (({}, {}), (bearer(CALLER), {}), ({}, {"cookies": {COOKIE: "e30.0000"}})):
            r = httpx.post(url + "/console/keys", data={**FORM, "id": "planted"}, headers=headers, **kw)
            assert r.status_code == 303 and r.headers["location"] == "/console/login?next=/console/keys"
        for headers in ({"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"}):
            for path, data in (("/console/keys", {**FORM, "id": "planted"}), ("/console/keys/caller/revoke", {}),
                               ("/console/keys/caller/limits", {"rpm": "1", "usd_per_day": "", "models": ""})):
                r = httpx.post(url + path, data=data, headers=headers, cookies=cookies)
                assert r.status_code == 403 and "another site" in r.text, (path, headers)
        crowded = "&".join(f"f{i}=1" for i in range(40))  # more fields than any console form has: 400, never a 500
        for path, extra in (("/console/keys/caller/revoke", {"cookies": cookies}), ("/console/login", {})):
            r = httpx.post(url + path, content=crowded, headers={"content-type": "application/x-www-form-urlencoded"},
                           **extra)
            assert r.status_code == 400 and "more than" in r.text, (path, r.status_code)
        page = httpx.get(url + "/console/keys", cookies=cookies).text
        assert "planted" not in page and 'id="key-caller"' in page and route(url, CALLER) == 200
        assert "yes," not in page  # nothing was revoked


def test_an_admin_creates_changes_and_revokes_a_key_and_the_other_replica_follows(client, monkeypatch, tmp_path,
                                                                                  caplog):
    with caplog.at_level(logging.INFO, logger="switchcraft.gateway"), \
            Loopback(replica(client, monkeypatch, tmp_path)) as a, Loopback(replica(client, monkeypatch, tmp_path)) as b:
        cookies = signed_in(a)
        made = httpx.post(a + "/console/keys", data=FORM, cookies=cookies)
        assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
        key = new_key(made.text)
        assert route(a, key) == 200  # this replica reloaded at once
        time.sleep(REFRESH_S + 0.1)
        assert route(b, key) == 200
        page = httpx.get(a + "/console/keys", cookies=cookies).text
        row = re.search(r'<tr id="key-acme">.*?</tr>', page, re.S).group(0)
        assert "$5.00" in row and CHEAP in row and "managed" in row and key not in page
        for data, status, words in (({**FORM}, 400, "a key with id &#39;acme&#39; exists already"),
                                    ({**FORM, "id": "x", "models": "gpt-5-nope"}, 400, "not in the pool: gpt-5-nope"),
                                    ({**FORM, "id": "x", "rpm": "many"}, 400, "rpm &#39;many&#39;: give a whole number"),
                                    ({**FORM, "id": "bad id!"}, 400, "id: String should match pattern")):
            r = httpx.post(a + "/console/keys", data=data, cookies=cookies)
            assert r.status_code == status and words in r.text and 'id="new-key"' not in r.text, (data, r.text[-800:])
        limited = httpx.post(a + "/console/keys/acme/limits", data={"rpm": "1", "usd_per_day": "", "models": ""},
                             cookies=cookies)
        assert limited.status_code == 303 and limited.headers["location"] == "/console/keys"
        time.sleep(REFRESH_S + 0.1)
        assert [route(b, key), route(b, key)] == [200, 429]  # the new limit, on the other replica
        revoked = httpx.post(a + "/console/keys/acme/revoke", cookies=cookies,
                             headers={"content-type": "application/x-www-form-urlencoded"})
        assert revoked.status_code == 303
        assert route(a, key) == 401
        time.sleep(REFRESH_S + 0.1)
        assert route(b, key) == 401 and route(b, KEY) == 200
        unknown = httpx.post(a + "/console/keys/nobody/revoke", cookies=cookies,
                             headers={"content-type": "application/x-www-form-urlencoded"})
        assert unknown.status_code == 404 and "no key &#39;nobody&#39;" in unknown.text
    assert key not in caplog.text and '"action": "revoke", "key": "acme", "by": "test"' in caplog.text


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=browser_missing() or "")
def test_a_real_browser_creates_a_key_that_works_then_revokes_it(client, monkeypatch, tmp_path):
    with Loopback(replica(client, monkeypatch, tmp_path)) as a, Loopback(replica(client, monkeypatch, tmp_path)) as b:
        browser = Browser(tmp_path / "profile")
        try:
            browser.open(a + "/console/keys")
            browser.type("#key", KEY)
            browser.click("#login")
            assert browser.wait_url(a + "/console/keys") == a + "/console/keys"
            browser.type("#new-id", "from-browser")
            browser.type("#new-usd", "3")
            browser.click("#create-key")
            key = browser.text("#new-key")
            assert key.startswith("sk-sc-") and route(a, key) == 200
            browser.screenshot(tmp_path / "created.png")
            time.sleep(REFRESH_S + 0.1)
            assert route(b, key) == 200  # the other replica
            browser.open(a + "/console/keys")  # the key is shown once: not on the page again
            assert "from-browser" in browser.text("#key-from-browser") and key not in browser.text("#managed-keys")
            browser.click('form[action="/console/keys/from-browser/revoke"] button')
            assert browser.wait_url(a + "/console/keys") == a + "/console/keys"
            assert "yes, " in browser.text("#key-from-browser")
            browser.screenshot(tmp_path / "revoked.png")
        finally:
            browser.close()
        assert route(a, key) == 401
        time.sleep(REFRESH_S + 0.1)
        assert route(b, key) == 401
    assert (tmp_path / "created.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
