"""`switchcraft bench soak`: a short run of every traffic kind, with a Redis restart and router reloads.

    .venv/bin/python -m pytest -q tests/evaluation/bench/test_soak.py

The whole stack on loopback (replay upstreams, `switchcraft serve` in its own process on a real Redis, an MCP
gateway in front of a fleet of MCP servers): nothing is lost, hostile input never gets a 5xx, the ledger covers
what the upstreams billed. The figures themselves are the README's, not a test's.
"""

from __future__ import annotations

import json
import random

import pytest

from evaluation.bench._soak_traffic import OVERSIZED_BYTES, Conversation, console_login
from tests.routers import REPO

pytestmark = pytest.mark.integration
KINDS = {"routed", "named", "stream", "stream_left", "hostile", "session", "console_login", "mcp_find", "mcp_call",
         "mcp_hostile"}


@pytest.mark.slow
def test_a_short_soak_loses_nothing_and_the_ledger_covers_what_was_billed(exported, shared_data, tmp_path):  # noqa: F811
    from evaluation.bench.soak import SoakConfig, run_soak, to_markdown, write_results

    cfg = SoakConfig(router_dir=exported[0], data_root=shared_data, pool=REPO / "configs" / "pool.yaml",
                     minutes=0.4, concurrency=4, reload_every_s=8, sample_every_s=1, mcp_tools=20)
    s = run_soak(cfg)
    statuses = s["statuses"]
    assert s["requests"] > 50 and s["outage_503"] > 0  # the Redis restart happened, keys with limits fail closed
    assert statuses.get("hostile:200", 0) > 0 and statuses.get("hostile:400", 0) > 0 and set(s["sent"]) == KINDS
    assert s["reloads"] == {"200": 2}
    checks = s["checks"]
    assert checks["no_input_5xx"] and checks["none_lost"], json.dumps({k: s[k] for k in ("statuses", "lost", "errors", "input_5xx", "outage_503")})
    assert checks["ledger_not_below_billed"] and checks["ledger_within_bound"], (s["ledger_usd"], s["billed_usd"])
    assert s["billed_usd"] > 0 and s["unpriced_completions"] == 0
    assert len(s["rss_mb"]) >= 10
    # the new kinds: refused logins, the MCP gateway's meta-tools answered, sessions that went past their first turn
    assert statuses.get("console_login:401", 0) > 0
    assert statuses.get("mcp_find:200", 0) > 0 and statuses.get("mcp_call:200", 0) > 0
    assert s["sessions_continued"] > 0 and statuses.get("session:200", 0) >= s["sessions_continued"]
    for key, n in statuses.items():  # 503s only while the store was down, and only where the store is asked
        kind, status = key.split(":")
        if status == "closed":  # an oversized login refused before its body was sent: the only kind that may be
            assert kind == "console_login", (key, n)
            continue
        assert status != "error" and (int(status) < 500 or (status == "503" and not kind.startswith(
            ("mcp_", "console_")))), (key, n)
    write_results(s, tmp_path / "soak.md")
    assert (tmp_path / "soak.png").exists() and "5xx to input" in to_markdown(s)


def test_a_conversation_reuses_its_session_for_its_turns_then_starts_another():
    rng, conv = random.Random(0), Conversation()
    body = {"model": "router", "messages": [{"role": "user", "content": "weather in Paris?"}]}
    first = conv.next_turn(rng, body, "http://gw", "soak")
    name, turns = first.headers["x-switchcraft-session"], conv.left + 1
    later = [conv.next_turn(rng, body, "http://gw", "soak") for _ in range(turns - 1)]
    assert {r.headers["x-switchcraft-session"] for r in later} == {name}
    assert [len(r.json["messages"]) for r in [first, *later]] == [1 + 2 * i for i in range(turns)]
    assert later[-1].json["messages"][-1] == body["messages"][-1] and later[-1].url == "http://gw/v1/chat/completions"
    assert conv.next_turn(rng, body, "http://gw", "soak").headers["x-switchcraft-session"] != name


def test_console_logins_use_wrong_keys_and_sometimes_a_body_past_the_limit():
    rng = random.Random(0)
    logins = [console_login(rng, "http://gw") for _ in range(200)]
    big = [r for r in logins if len(r.content) > OVERSIZED_BYTES]
    assert 0 < len(big) < 30 and all(r.url == "http://gw/console/login" for r in logins)
    assert all(r.content.startswith(b"key=sk-sc-") for r in logins if r not in big)
