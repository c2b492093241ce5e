"""A careless operator and a hostile caller, the smaller holes: reserved key ids, a role given as a string, an
unwritable decision log, an over-long model name, the trailing-slash redirect, bodies not in UTF-8 JSON.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_hostile2.py

Real parts: the gateway on loopback in front of the replay server (tests/serving/gateway/test_limits.py
`make_gateway`), `switchcraft serve` and `switchcraft gateway-key` as an operator runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from data.logged import FILE
from data.pool import load_pool
from serving.app import create_app
from serving.core.auth import AuthSettings, KeyStore
from serving.gateway.config import ServingConfig
from evaluation.harness import free_port
from tests.routers import REPO
from tests.serving.helpers import AUTH, KEY, KEYS_ENV, post

pytestmark = pytest.mark.integration
POOL = load_pool(REPO / "configs" / "pool.yaml")
USER = [{"role": "user", "content": "weather in Paris?"}]
ROUTE = json.dumps({"messages": USER}).encode()


# --- key names and key files ----------------------------------------------------------------------------------
def test_a_reserved_key_id_is_refused_by_gateway_key_and_by_key_loading(tmp_path, client):
    from switchcraft.cli import app

    out = CliRunner().invoke(app, ["gateway-key", "--id", "__explore__", "--out", str(tmp_path / "keys.yaml")])
    assert out.exit_code == 1 and "--id: '__explore__' is reserved" in out.output, out.output
    assert not (tmp_path / "keys.yaml").exists()
    entry = {"id": "__explore__", "key": "sk-sc-" + "x" * 30}
    with pytest.raises(ValueError, match=r"\$SWITCHCRAFT_GATEWAY_KEYS: keys\[0\]\.id: '__explore__' is reserved"):
        KeyStore.from_settings(AuthSettings(), environ={KEYS_ENV: json.dumps([entry])})
    (tmp_path / "file.yaml").write_text(yaml.safe_dump({"keys": [{"id": "__ops__", "sha256": "0" * 64}]}))
    with pytest.raises(ValueError, match=r"file.yaml: keys\[0\]\.id: '__ops__' is reserved"):
        create_app(ServingConfig(auth={"keys_file": str(tmp_path / "file.yaml"), "keys_env": None}), client=client,
                   pool=POOL)


def test_roles_given_as_a_string_are_refused_never_read_as_letters(tmp_path, make_gateway):
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - id: acme-support\n    sha256: '" + "0" * 64 + "'\n    caller: {tenant: acme, roles: support}\n")
    with pytest.raises(ValueError) as e:
        KeyStore.from_settings(AuthSettings(keys_file=str(keys), keys_env=None))
    assert str(e.value) == (f"{keys}: keys[0].caller.roles: must be a list of names, not the string 'support'; "
                            "write [support]")
    url = make_gateway()  # a body's caller: a 400 naming the field, not a 403 over the letters s, u, p, o, r, t
    r = post(url + "/v1/route", json={"messages": USER, "constraints": {"caller": {"roles": "support"}}}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "constraints.caller.roles", r.text


@pytest.mark.slow
def test_an_unwritable_log_path_is_a_start_up_error_naming_it(tmp_path, exported):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    occupied = tmp_path / "log"
    (occupied / FILE).mkdir(parents=True)  # where the log's file goes: a folder, which SQLite cannot open
    env = {**os.environ, KEYS_ENV: json.dumps([{"id": "test", "key": KEY, "role": "admin"}])}
    for where in (blocker / "log", occupied):
        out = subprocess.run([sys.executable, "-m", "switchcraft.cli", "serve", "--config",
                              str(REPO / "configs" / "serving.yaml"), f"router.dir={exported[0]}", f"log.path={where}",
                              f"upstream.pool={REPO / 'configs' / 'pool.yaml'}",
                              f"port={free_port()}"], env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
        text = out.stdout + out.stderr
        assert out.returncode == 1 and "Traceback" not in text, text[-3000:]
        assert f"log.path {where}: the decision log cannot be written there" in " ".join(text.split()), text[-3000:]


# --- what a caller sends ---------------------------------------------------------------------------------------
def test_an_over_long_model_name_is_not_echoed_back_whole(make_gateway):
    url = make_gateway()
    for model, status in (("m" * 1_000_000, 404), ("router-" + "9" * 500_000, 400), ("router" + "x" * 300_000, 400)):
        for path in ("/v1/chat/completions", "/v1/messages"):
            r = post(url + path, json={"model": model, "max_tokens": 16, "messages": USER}, timeout=60)
            assert r.status_code == status and len(r.content) < 2_000, (path, status, len(r.content))
            assert "characters)" in r.text


def test_a_trailing_slash_is_not_redirected_to_the_host_the_caller_names(make_gateway):
    url = make_gateway()
    for path in ("/v1/chat/completions/", "/v1/route/", "/healthz/"):
        r = httpx.post(url + path, content=ROUTE, headers={**AUTH, "host": "evil.example",
                                                           "content-type": "application/json"}, timeout=30)
        assert r.status_code != 307 and "location" not in r.headers, (path, r.status_code, r.headers)
        assert "evil.example" not in r.text
        # a 404 in the API's own error shape, naming the likely mistake
        error = r.json()["error"]
        assert r.status_code == 404 and error["type"] == "not_found_error" and error["code"] == 404, r.text
        assert ("without the trailing slash: " + path.rstrip("/") in error["message"]) == path.startswith("/v1/")
    r = httpx.post(url + "/v1/messages/", content=ROUTE, headers=AUTH, timeout=30)
    assert r.status_code == 404 and r.json()["type"] == "error" and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(url + "/v1/chat/completions", headers=AUTH, timeout=30)
    assert r.status_code == 405 and r.json()["error"]["message"] == "/v1/chat/completions does not take GET"


@pytest.mark.parametrize("endpoint", ["/v1/route", "/v1/chat/completions", "/v1/messages"])
def test_bodies_are_utf8_json_only(make_gateway, endpoint):
    """RFC 8259 §8.1: JSON between systems is UTF-8. UTF-16/32 bodies are a 400, a non-JSON Content-Type (or
    another charset) a 415, each in the endpoint's error shape; a UTF-8 byte order mark is ignored."""
    url = make_gateway()
    body = {"model": "router", "max_tokens": 16, "messages": USER}
    text = json.dumps(body)

    def send(raw: bytes, ctype: str | None = "application/json") -> httpx.Response:
        headers = {**AUTH, **({"content-type": ctype} if ctype else {})}
        return httpx.post(url + endpoint, content=raw, headers=headers, timeout=30)

    def message(r: httpx.Response) -> str:
        return r.json()["error"]["message"]

    for codec in ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"):
        r = send(text.encode(codec))
        assert r.status_code == 400 and "UTF-16 or UTF-32" in message(r) and "RFC 8259" in message(r), (codec, r.text)
    r = send(text.encode() + b"\xff")
    assert r.status_code == 400 and "not UTF-8" in message(r)
    for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data",
                  "application/json; charset=utf-16"):
        r = send(text.encode(), ctype)
        assert r.status_code == 415, (ctype, r.text)
        assert "UTF-8" in message(r) and r.headers["connection"] == "close"
        if endpoint == "/v1/messages":
            assert r.json()["type"] == "error"
        else:
            assert r.json()["error"]["param"] == "content-type"
    # Read as JSON (the replay upstream may not know this conversation: 502 is its answer, not a refusal).
    for ok in (None, "application/json; charset=utf-8", "application/vnd.api+json"):
        assert send(text.encode(), ok).status_code in (200, 502), ok
    assert send(b"\xef\xbb\xbf" + text.encode()).status_code in (200, 502)
