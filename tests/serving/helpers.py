"""Plain helpers of the serving tests (fixtures live in conftest.py): the gateway's test keys, requests with them,
a uvicorn server on loopback, OpenAI bodies from examples, and waits on the gateway's background work.

The upstream key SECRET must never appear in a log or an output; KEY is the gateway's own admin key, given by
environment as an operator would (`use_keys`).
"""

from __future__ import annotations

import json
import shutil
import time

import httpx
import numpy as np

from evaluation.harness import Loopback  # noqa: F401 - a server on loopback for the tests' apps

from data.logged import read_log
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
