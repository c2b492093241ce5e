"""`switchcraft bench sessions` (evaluation/offline/sessions.py): per-call vs session-aware routing priced on
multi-turn conversations, the gateway's own keep-or-switch rule deciding, providers' cache prices billing.

    .venv/bin/python -m pytest -q tests/evaluation/offline/test_sessions.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from data.pool import Pool
from evaluation.offline.sessions import (Biller, Conversation, Turn, replay, summarize, with_cache_prices)
from serving.policy import Decision
from tests.routers import REPO

POOL = Pool.model_validate({"models": [
    {"name": "big", "prices": {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cached_input_per_mtok": 0.3,
                               "cache_write_per_mtok": 3.75}},
    {"name": "small", "prices": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}}]})
COSTS = {"big": 0.01, "small": 0.01}


def decision(chosen: str) -> Decision:
    return Decision(chosen, "rule", 0.5, {m: 0.9 for m in COSTS}, COSTS, [chosen] + [m for m in COSTS if m != chosen])


def conversation(tools=("t", "t", "t")) -> Conversation:
    return Conversation("c", [Turn(f"c:turn{k}", n, 100, tools[k]) for k, n in enumerate((10_000, 20_000, 30_000))])


def test_the_session_keeps_its_model_where_per_call_routing_switches_and_each_is_billed_as_providers_bill():
    r = replay(conversation(), [decision("big"), decision("small"), decision("big")], POOL, Biller(POOL, COSTS),
               gap_s=20.0, ttl_s=300.0)
    assert r["models"] == {"per_call": ["big", "small", "big"], "session": ["big", "big", "big"]}
    assert r["rules"] == ["new", "kept", "same_model"]  # keep_or_switch: staying on big's cache beats small
    assert r["switches"] == {"per_call": 2, "per_call_cached": 2, "session": 0}
    # per call: every input token at its full price, output at the answer's 100 tokens
    assert r["usd"]["per_call"] == pytest.approx((10_000 * 3 + 1_500 + 20_000 * 2.5 + 1_000 + 30_000 * 3 + 1_500) / 1e6)
    # per call with the cache: no turn stays on its model, so every turn writes its whole input
    assert r["usd"]["per_call_cached"] == pytest.approx((10_000 * 3.75 + 1_500 + 20_000 * 2.5 + 1_000
                                                         + 30_000 * 3.75 + 1_500) / 1e6)
    # session: the previous turn's input + answer read from big's cache, the rest written
    assert r["usd"]["session"] == pytest.approx((10_000 * 3.75 + 1_500 + 10_100 * 0.3 + 9_900 * 3.75 + 1_500
                                                 + 20_100 * 0.3 + 9_900 * 3.75 + 1_500) / 1e6)


def test_a_changed_tool_list_or_an_expired_cache_reads_nothing_from_the_cache():
    bill, big = Biller(POOL, COSTS), [decision("big")] * 3
    changed = replay(conversation(("t", "u", "u")), big, POOL, bill, gap_s=20.0, ttl_s=300.0)
    assert changed["usd"]["session"] == pytest.approx((10_000 * 3.75 + 20_000 * 3.75 + 20_100 * 0.3 + 9_900 * 3.75
                                                       + 3 * 1_500) / 1e6)
    late = replay(conversation(), [decision("big"), decision("small"), decision("big")], POOL, bill, gap_s=400.0,
                  ttl_s=300.0)
    assert late["rules"] == ["new", "cache_expired", "cache_expired"] and late["switches"]["session"] == 2


def test_the_summary_gives_intervals_over_conversations_and_the_paired_difference():
    runs = [replay(conversation(), [decision("big"), decision(m), decision("big")], POOL, Biller(POOL, COSTS),
                   gap_s=20.0, ttl_s=300.0) for m in ("small", "big", "small", "small")]
    s = summarize(runs, resamples=200)
    per_call, session = s["rows"]["per_call"], s["rows"]["session"]
    assert per_call["delta_vs_per_call"] == 0 and per_call["delta_ci"] == [0, 0]
    assert per_call["usd_ci"][0] <= per_call["usd_per_million_conversations"] <= per_call["usd_ci"][1]
    assert per_call["switches_per_transition"] == pytest.approx(6 / 8) and per_call["conversations_with_a_switch"] == 0.75
    assert session["switches_per_transition"] == 0 and session["delta_ci"][1] < 0  # cheaper in every resample
    assert s["session_rules"] == {"kept": 3, "new": 4, "same_model": 5}
    assert per_call["turns_below_threshold"] == 0 and session["turns_below_threshold"] == 0  # P 0.9 ≥ τ 0.5


def test_a_previous_model_the_router_is_unsure_of_is_not_kept_however_cheap_its_cache():
    unsure = Decision("small", "cheapest_confident", 0.8, {"big": 0.7, "small": 0.85}, COSTS, ["small", "big"])
    r = replay(conversation(), [decision("big"), unsure, decision("big")], POOL, Biller(POOL, COSTS), gap_s=20.0,
               ttl_s=300.0)
    assert r["rules"][1] == "previous_below_the_rule"
    assert r["below_threshold"] == {"per_call": 0, "per_call_cached": 0, "session": 0}


def test_cache_prices_come_from_the_table_only_where_the_pool_has_none():
    pool = with_cache_prices(Pool.model_validate({"models": [
        {"name": "claude-3-5-sonnet-20240620", "prices": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}},
        {"name": "gpt-4o-mini", "prices": {"input_per_mtok": 0.15, "output_per_mtok": 0.6,
                                           "cached_input_per_mtok": 0.1}},
        {"name": "unknown", "prices": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}]}))
    sonnet, mini, unknown = (pool.get(m).prices for m in pool.names)
    assert (sonnet.cached_input_price, sonnet.cache_write_price) == (0.30, 3.75)
    assert (mini.cached_input_price, mini.cache_write_price) == (0.1, 0.15)  # the pool's own price stands
    assert (unknown.cached_input_price, unknown.cache_write_price) == (1.0, 1.0)


def test_the_command_replays_bfcl_v4_multi_turn_conversations_with_a_router(tiny_router_dir, tmp_path):
    from switchcraft.cli import app

    out = tmp_path / "sessions.json"
    res = CliRunner().invoke(app, ["bench", "sessions", "--router", str(tiny_router_dir), "--pool",
                                   str(REPO / "configs" / "pool.yaml"), "--category", "multi_turn_base",
                                   "--limit", "3", "--threshold", "0.5", "--threshold", "0.9", "--out", str(out)])
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert got["conversations"] == 3 and got["turns"] >= 6 and set(got["thresholds"]) == {"0.5", "0.9"}
    for summary in got["thresholds"].values():
        assert set(summary["rows"]) == {"per_call", "per_call_cached", "session"}
        assert all(r["usd_per_million_conversations"] > 0 for r in summary["rows"].values())
        assert sum(summary["session_rules"].values()) == got["turns"] and summary["session_rules"]["new"] == 3
    assert "| 0.9 | session |" in res.output
