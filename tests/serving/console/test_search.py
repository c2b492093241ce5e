"""The Requests view's search and pages, a trace's timeline, the Router view's per-version figures and the Traffic
view's new tables, on logs written through the gateway's own decision-log writer (DecisionLog.write).

    .venv/bin/python -m pytest -q tests/serving/console/test_search.py
"""

from __future__ import annotations

import json
import time
from html import escape

import pytest

from data.pool import Pool
from evaluation.synthetic_log import synthetic_records
from serving.console import charts
from serving.console.logdb import open_log
from serving.console.quality import quality
from serving.console.queries import trace, traffic, version_costs
from serving.console.search import PAGE_SIZE, search_requests, timeline
from serving.core.decision_log import DecisionLog

NOW = 1_796_000_000.0
WEATHER = [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def request(i: int, *, ts: float, text: str | None = None, example: str | None = None, cost: float = 0.001,
            latency: float = 500.0, status: int = 200, by: str = "cheap", version: str = "v1") -> dict:
    return {"ts": ts, "request_id": f"req{i:04d}", "key_id": "acme", "router_version": version, "kind": "served",
            "status": status, "example_id": example, "routed": 1, "chosen": by, "rule": "threshold",
            "strategy": f"single({by})", "verdict": None, "kinds": "[]", "answered_by": by if status == 200 else None,
            "cost_usd": cost, "latency_ms": latency, "stream": 0, "api": "chat", "session": None,
            "request": None if text is None else json.dumps({"messages": [{"role": "user", "content": text}],
                                                             "tools": []})}


def answer(rid: str, model: str, role: str, calls=WEATHER, ms: float = 300.0, outcome: str = "ok") -> dict:
    return {"request_id": rid, "model": model, "role": role, "outcome": outcome, "latency_ms": ms, "cost_usd": 0.0005,
            "input_tokens": 900, "output_tokens": 30, "calls": json.dumps(calls) if outcome == "ok" else None,
            "raw": None, "decoder": "json", "decode_error": None}


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """120 requests, one a minute: every 10th explored, every 7th with text about Oslo, #5 a benchmark query."""
    folder = tmp_path_factory.mktemp("search")
    writer = DecisionLog(folder, max_mb=1e9)
    batch = []
    for i in range(120):
        r = request(i, ts=NOW - 7200 + 60 * i, text=f"weather in {'Oslo' if i % 7 == 0 else 'Lima'}",
                    example="bfcl-simple-5" if i == 5 else None, cost=0.001 * (i % 5), latency=100.0 * (i % 30))
        batch.append(("request", r, [answer(r["request_id"], "cheap", "first")]))
        if i % 10 == 0:
            batch.append(("answers", None, [answer(r["request_id"], m, "explore") for m in ("mid", "big")]))
    writer.write(batch)
    writer.db.close()
    return folder


def ids(page) -> list[str]:
    return [r["request_id"] for r in page["rows"]]


def test_pages_are_newest_first_fifty_each_with_a_next_link_until_the_last(log):
    with open_log(log, 0.0) as db:
        first, second, third = (search_requests(db, since=0.0, page=p) for p in range(3))
    assert PAGE_SIZE == 50 and len(first["rows"]) == 50 and ids(first)[0] == "req0119" and first["more"]
    assert ids(second)[0] == "req0069" and second["more"] and ids(third) == [f"req{i:04d}" for i in range(19, -1, -1)]
    assert not third["more"]


def test_search_finds_an_id_its_start_an_example_id_and_the_requests_text(log):
    with open_log(log, 0.0) as db:
        assert ids(search_requests(db, since=0.0, q="req0042")) == ["req0042"]
        assert ids(search_requests(db, since=0.0, q="req001")) == [f"req{i:04d}" for i in range(19, 9, -1)]
        assert ids(search_requests(db, since=0.0, q="bfcl-simple-5")) == ["req0005"]
        oslo = ids(search_requests(db, since=0.0, q="Oslo", size=100))
        assert oslo == [f"req{i:04d}" for i in range(119, -1, -1) if i % 7 == 0]
        assert search_requests(db, since=0.0, q="Reykjavik")["rows"] == []


def test_filters_explored_cost_and_latency(log):
    with open_log(log, 0.0) as db:
        explored = ids(search_requests(db, since=0.0, explored=True, size=100))
        not_explored = search_requests(db, since=0.0, explored=False, size=200)["rows"]
        dear = search_requests(db, since=0.0, cost_above=0.0035, size=200)["rows"]
        slow = search_requests(db, since=0.0, latency_above=2850, size=200)["rows"]
    assert explored == [f"req{i:04d}" for i in range(110, -1, -10)] and len(not_explored) == 108
    assert {r["cost_usd"] for r in dear} == {0.004} and len(dear) == 24
    assert {r["latency_ms"] for r in slow} == {2900.0} and len(slow) == 4


def test_a_timeline_orders_the_calls_marks_the_returned_answer_and_groups_identical_answers(tmp_path):
    writer = DecisionLog(tmp_path, max_mb=1e9)
    r = request(1, ts=NOW, by="big", latency=1500.0)
    other = [{"name": "get_weather", "arguments": {"city": "Lima"}}]
    calls = [answer("req0001", "cheap", "first", ms=400.0), answer("req0001", "mid", "first", other, ms=600.0),
             answer("req0001", "big", "escalate", ms=800.0)]
    writer.write([("request", r, calls),
                  ("answers", None, [answer("req0001", f"m{i}", "explore", ms=200.0) for i in range(14)])])
    writer.db.close()
    with open_log(tmp_path, 0.0) as db:
        line = timeline(trace(db, "req0001"))
    starts = [(c["model"], c["role"], c["start_ms"]) for c in line["calls"]]
    assert starts[:3] == [("cheap", "first", 0.0), ("mid", "first", 0.0), ("big", "escalate", 600.0)]
    assert all(s == 1500.0 for _, role, s in starts[3:] if role == "explore") and len(starts) == 17
    assert [c["model"] for c in line["calls"] if c.get("returned")] == ["big"]
    assert [(g["count"], g["returned"]) for g in line["answers"]] == [(16, True), (1, False)]
    assert line["answers"][1]["models"] == ["mid"] and line["answers"][1]["calls"] == other


def test_each_router_version_has_its_consensus_quality_and_cost_per_request(tmp_path):
    pool = Pool.model_validate({"models": [
        {"name": "cheap", "prices": {"input_per_mtok": 0.1, "output_per_mtok": 0.4}},
        {"name": "mid", "prices": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}},
        {"name": "big", "prices": {"input_per_mtok": 5.0, "output_per_mtok": 15.0}}]})
    writer = DecisionLog(tmp_path, max_mb=1e9)
    for batch in synthetic_records(pool, 900, 3.0, now=NOW, explore=0.2, seed=1):
        writer.write(batch)
    writer.db.close()
    with open_log(tmp_path, 0.0) as db:
        q = quality(db, since=0.0, pool_names=pool.names)
        costs = version_costs(db, since=0.0, now=NOW)
        exact = {v: (n, usd) for v, n, usd in db.execute(
            "SELECT router_version, COUNT(*), SUM(cost_usd) FROM requests WHERE status = 200 GROUP BY 1")}
    assert set(q["per_version"]) == {"bench-v1", "bench-v2"}
    assert sum(v["n"] for v in q["per_version"].values()) == q["served"]["n"]
    assert sum(v["k"] for v in q["per_version"].values()) == q["served"]["k"]
    for version, (n, usd) in exact.items():  # exact but for the reload's hour, split by request counts
        assert costs[version]["requests"] == pytest.approx(n, abs=15)
        assert costs[version]["usd_per_request"] == pytest.approx(usd / n, rel=0.05)


def test_traffic_ranks_spend_and_latency_over_time_and_the_strategy_chart_keeps_ten(log):
    with open_log(log, 0.0) as db:
        t = traffic(db, since=NOW - 3 * 3600, now=NOW)
        spent = db.execute("SELECT SUM(cost_usd) FROM answers").fetchone()[0]
    assert sum(m["usd"] for m in t["spend_per_model"]) == pytest.approx(spent)
    assert {m["model"]: m["explore_usd"] > 0 for m in t["spend_per_model"]} == {"cheap": False, "mid": True,
                                                                                "big": True}
    assert sum(r["requests"] for r in t["spend_per_key"]) == 120 and {r["key"] for r in t["spend_per_key"]} == {"acme"}
    assert len(t["latency_over_time"]) >= 2 and all(r["p99_ms"] >= r["p50_ms"] for r in t["latency_over_time"])
    items = [(f"agree(model-{i}-with-a-long-name, other-model-{i})>escalation-model-{i}", 100 - i) for i in range(14)]
    kept = charts.top_n(items)
    assert len(kept) == 11 and kept[-1] == ("other (4)", sum(100 - i for i in range(10, 14)))
    svg = charts.bars(kept, title="strategy")
    assert escape(items[0][0]) + "</text>" in svg  # whole, not elided: the label column is as wide as the longest label
    label_x = float(svg.split('text-anchor="end"')[0].rsplit('x="', 1)[1].split('"')[0])
    assert label_x >= 7 * len(items[0][0])  # room at the left for the whole label
    hours = charts.columns([f"2026-12-04 {h:02d}:00" for h in range(24)], {"requests": [1.0] * 24}, title="t")
    assert hours.count('font-size="10"') == 8  # every 3rd hour named: 11-character labels ~69 px apart, no overlap
    days = charts.columns([f"2026-12-{d:02d}" for d in range(1, 9)], {"spent": [1.0] * 8}, title="t")
    assert days.count('font-size="10"') == 8  # a week's days all fit


def test_the_consensus_labels_are_reused_across_views_for_their_ttl(log, monkeypatch):
    import serving.console.quality as quality_module

    calls = []
    real = quality_module.quality
    monkeypatch.setattr(quality_module, "quality", lambda db, **kw: calls.append(kw) or real(db, **kw))
    cache = quality_module.QualityCache(ttl_s=30.0)
    with open_log(log, 0.0) as db:
        first = cache.get(db, log, since=0.0, now=NOW, pool_names=["cheap", "mid", "big"])
        again = cache.get(db, log, since=0.0, now=NOW + 29, pool_names=["cheap", "mid", "big"])
        later = cache.get(db, log, since=0.0, now=NOW + 31, pool_names=["cheap", "mid", "big"])
    assert again is first and later is not first and len(calls) == 2 and first["explored"] == 12


def test_traffic_shows_the_gateways_overhead_beside_latency_and_reads_a_log_from_before_it(tmp_path):
    """Each hour's overhead P50/P99 from the rows' overhead_ms; a rotated file written before the column existed
    (no overhead_ms, no replica) is still read: its requests count, its overhead is unknown."""
    old = tmp_path / "old"
    writer = DecisionLog(old, max_mb=1e9)
    writer.write([("request", request(i, ts=NOW - 7200 + 60 * i), []) for i in range(30)])
    writer.db.execute("ALTER TABLE requests DROP COLUMN overhead_ms")
    writer.db.execute("ALTER TABLE requests DROP COLUMN replica")
    writer.db.close()
    folder = tmp_path / "log"
    folder.mkdir()
    (old / "decisions.sqlite").rename(folder / "decisions.1700000000000.sqlite")  # as rotation names it
    writer = DecisionLog(folder, max_mb=1e9, replica="gw-1:42")
    own = {i: 1.0 + i % 9 for i in range(30, 120)}  # 1..9 ms
    writer.write([("request", {**request(i, ts=NOW - 7200 + 60 * i), "overhead_ms": own[i], "replica": "gw-1:42"},
                   []) for i in own])
    writer.db.close()
    with open_log(folder, 0.0) as db:
        t = traffic(db, since=NOW - 3 * 3600, now=NOW)
        replicas = {r[0] for r in db.execute("SELECT DISTINCT replica FROM requests")}
    assert t["requests"] == 120 and replicas == {None, "gw-1:42"}
    assert t["latency"]["overhead_p50_ms"] == pytest.approx(5.0, rel=0.03)
    assert t["latency"]["overhead_p99_ms"] == pytest.approx(9.0, rel=0.03)
    by_hour = {r["group"]: r for r in t["latency_over_time"]}
    for hour, rows in {h: [v for i, v in own.items() if time.strftime("%Y-%m-%d %H:00", time.gmtime(
            NOW - 7200 + 60 * i)) == h] for h in by_hour}.items():
        expected = sorted(rows)[max(0, -(-len(rows) // 2) - 1)] if rows else None
        got = by_hour[hour]["overhead_p50_ms"]
        assert (got is None and expected is None) or got == pytest.approx(expected, rel=0.03)
        assert by_hour[hour]["p50_ms"] is not None  # beside the whole request's latency
