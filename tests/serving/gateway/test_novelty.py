"""A request unlike the router's training requests goes to the pool's safe model through the gateway (the
batcher's path), and the decision says so; benchmark requests are routed as before.

    .venv/bin/python -m pytest tests/serving/gateway/test_novelty.py -q
"""

from __future__ import annotations

import numpy as np
import pytest

from serving.client import RouterClient
from tests.routers import agent_request, with_novelty
from tests.serving.gateway.helpers import pool_env, replay_app
from tests.serving.helpers import Loopback, openai_body, post
from training.folds import grouped_folds
from training.novelty import Novelty

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def novel_client(exported, bfcl_examples, tmp_path_factory):
    from training.export import RequestEncoder

    encoder = RequestEncoder.from_dir(exported[0])
    rows = [encoder.encode(e.messages, e.tools) for e in bfcl_examples]
    fitted = Novelty.fit([r[0] for r in rows], np.array([r[1] for r in rows]),
                         grouped_folds([e.id for e in bfcl_examples], 5, 0), safe_model="claude-3-5-sonnet-20240620")
    c = RouterClient.from_dir(with_novelty(exported[0], fitted, tmp_path_factory.mktemp("n") / "r"), threads=1)
    yield c
    c.close()


def test_the_gateway_sends_an_agent_request_to_the_safe_model(novel_client, replay, cascade_examples, monkeypatch):
    good, _ = replay
    pool_env(monkeypatch)
    messages, tools = agent_request()
    body = {"messages": [m.model_dump(exclude_none=True) for m in messages],
            "tools": [{"type": "function", "function": t.model_dump(exclude={"original"})} for t in tools]}
    with Loopback(replay_app(novel_client, good)) as url:
        r = post(url + "/v1/route", json=body, timeout=30)
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["chosen"] == "claude-3-5-sonnet-20240620" and r.headers["x-switchcraft-model"] == d["chosen"]
        assert d["strategy"]["first"] == ["claude-3-5-sonnet-20240620"] and d["strategy_why"]["rule"] == "novelty"
        assert d["novelty"]["applied"] and d["novelty"]["score"] > d["novelty"]["threshold"]
        plain = [post(url + "/v1/route", json={k: openai_body(ex)[k] for k in ("messages", "tools")}, timeout=30).json()
                 for ex in cascade_examples[:20]]
        assert all("novelty" in p for p in plain) and sum(p["novelty"]["applied"] for p in plain) <= 2
