"""Plain helpers of the serving tests (fixtures live in conftest.py): the gateway's test keys, requests with them,
a uvicorn server on loopback, `switchcraft serve` in a process of its own in front of the replay server, OpenAI
bodies from examples, and waits on the gateway's background work.

The upstream key SECRET must never appear in a log or an output; KEY is the gateway's own admin key, given by
environment as an operator would (`use_keys`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import yaml

from evaluation.harness import Loopback, free_port  # noqa: F401 - Loopback: a server on loopback for the tests' apps

from data.logged import read_log
from tests.routers import REPO
from training.policy import Strategy, StrategyPolicy

SECRET = "sk-test-gateway-0123456789-never-log-me"  # the pool's provider key (upstream)
KEY = "sk-sc-test-gateway-key-0123456789abcdef"  # the gateway's own API key (inbound): anonymous caller, no limits, admin
AUTH = {"authorization": f"Bearer {KEY}"}
KEYS_ENV = "SWITCHCRAFT_GATEWAY_KEYS"


def use_keys(monkeypatch, *entries: dict) -> None:
    """The gateway's API keys given by environment, as an operator would (plain keys there, hashed when read)."""
    monkeypatch.setenv(KEYS_ENV, json.dumps([{"id": "test", "key": KEY, "role": "admin"}, *entries]))


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def post(url: str, **kw) -> httpx.Response:
    """httpx.post with the test key (a `headers` authorization wins)."""
    return httpx.post(url, **{**kw, "headers": {**AUTH, **(kw.get("headers") or {})}})


def stream(method: str, url: str, **kw):
    return httpx.stream(method, url, **{**kw, "headers": {**AUTH, **(kw.get("headers") or {})}})


def replay_pool_file(pool, base_url: str, path: Path) -> Path:
    """`pool` written to `path` with every model's base_url the replay server's (what `upstream.pool` names)."""
    models = [m.model_copy(update={"base_url": base_url}) for m in pool.models]
    path.write_text(yaml.safe_dump(pool.model_copy(update={"models": models}).model_dump(mode="json",
                                                                                         exclude_none=True)))
    return path


def serve_env(pool, *keys: dict) -> dict[str, str]:
    """This environment plus what an operator exports for `switchcraft serve`: the gateway's keys (the test admin
    key and `keys`) and every pool model's provider key."""
    return {**os.environ, KEYS_ENV: json.dumps([{"id": "ops", "key": KEY, "role": "admin"}, *keys]),
            **{m.api_key_env: SECRET for m in pool.models if m.api_key_env}}


def start_serve(args: list[str], out: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`switchcraft serve ARGS --port <free>` in a process of its own, its output in `out`: (process, base URL),
    without waiting for it (`wait_ready`)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "switchcraft.cli", "serve", "--port", str(port), *args], cwd=REPO,
                            env=env, stdout=open(out, "w"), stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(proc: subprocess.Popen, url: str, out: Path, timeout_s: float = 120.0) -> None:
    """Until the gateway's /readyz answers 200; its output's tail if it exits or times out first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, out.read_text()[-3000:]
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.terminate()
    raise AssertionError(f"the gateway was not ready in {timeout_s:g} s: " + out.read_text()[-3000:])


def openai_body(example, model: str = "router", **extra) -> dict:
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
             for t in example.tools]
    messages = [{"role": m.role, "content": m.content} for m in example.messages]
    return {"model": model, "messages": messages, "tools": tools, "metadata": {"example_id": example.id}, **extra}


def wait_for(check, timeout_s: float = 60.0):
    """Exploration and the log's writer run after the answer went out: poll until `check()` is truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out = check()
        except FileNotFoundError:
            out = None
        if out:
            return out
        assert time.monotonic() < deadline, "background work did not finish"
        time.sleep(0.1)


def log_has(folder, n_requests: int, n_answers: int):
    requests, answers = read_log(folder)
    return (requests, answers) if len(requests) >= n_requests and len(answers) >= n_answers else None


def explorations(url: str, outcome: str, n: int) -> bool:
    return f'switchcraft_explorations_total{{outcome="{outcome}"}} {float(n)}' in httpx.get(
        url + "/metrics", headers=AUTH).text


def chat(question: str, caller=None, model: str = "router", **extra) -> dict:
    """A one-question chat body, the caller (when given) in its switchcraft field."""
    body = {"model": model, "messages": [{"role": "user", "content": question}], **extra}
    if caller is not None:
        body["switchcraft"] = {"caller": caller}
    return body


def with_strategy_policy(exported, tmp_path):
    """The exported router with a strategy policy in router.json, as `switchcraft reproduce` writes it."""
    out, _ = exported
    dst = tmp_path / "router_onnx"
    shutil.copytree(out, dst)
    info = json.loads((dst / "router.json").read_text())
    models = info["models"]
    menu = [Strategy.single(models[0]), Strategy.agree(models[0], models[1], escalate=(models[2],))]
    rng = np.random.default_rng(0)
    probs = rng.uniform(0.05, 0.95, (200, len(models)))
    # The cascade is right whenever the single is, and more often: with a large λ it is always worth its cost.
    single_ok = rng.random(200) < 0.5
    correct = np.stack([single_ok, single_ok | (rng.random(200) < 0.8)], axis=1)
    cost = np.tile([1e-4, 3e-4], (200, 1))
    info["strategy_policy"] = StrategyPolicy.fit(models, menu, probs, correct, cost, lam=10.0).to_json()
    (dst / "router.json").write_text(json.dumps(info))
    return dst, models
