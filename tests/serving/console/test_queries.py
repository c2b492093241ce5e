"""The console's parts on their own: the session cookie, the log opened for a time range (rotated files, the row-id
search), the figures of a hand-made log, the latency histogram and the charts' escaping; the writer's per-hour
summary giving the same figures as the rows (whole hours from it, the edges from the rows), a log without one.

    .venv/bin/python -m pytest -q tests/serving/console/test_queries.py
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from data.logged import log_files
from data.pool import Pool, load_pool
from evaluation.synthetic_log import synthetic_records
from serving.console import charts
from serving.console.logdb import open_log
from serving.console.search import search_requests
from serving.console.queries import (cascades, counterfactual_usd, filter_values, quantiles,
                                     router_versions, savings, traffic, wilson)
from serving.console.session import Sessions
from serving.core.decision_log import SCHEMA, DecisionLog
from tests.routers import REPO

NOW = 1_796_000_000.0
POOL = Pool.model_validate({"models": [
    {"name": "cheap", "prices": {"input_per_mtok": 0.1, "output_per_mtok": 0.4}},
    {"name": "big", "prices": {"input_per_mtok": 5.0, "output_per_mtok": 15.0}}]})


def write_log(path, rows):
    """rows: (ts, request_id, key, status, answered_by, cost, latency_ms, verdict, answers: [(model, role, tin, tout)])"""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    for ts, rid, key, status, by, cost, ms, verdict, answers in rows:
        db.execute("INSERT INTO requests (ts, request_id, key_id, router_version, kind, status, strategy, verdict, "
                   "kinds, answered_by, cost_usd, latency_ms) VALUES (?, ?, ?, 'v1', 'served', ?, ?, ?, ?, ?, ?, ?)",
                   (ts, rid, key, status, f"single({by})" if verdict is None else "agree(cheap, big)", verdict,
                    json.dumps(["arguments"] if verdict == "disagree" else []), by, cost, ms))
        for model, role, tin, tout in answers:
            db.execute("INSERT INTO answers (request_id, model, role, outcome, latency_ms, cost_usd, input_tokens, "
                       "output_tokens, calls) VALUES (?, ?, ?, 'ok', ?, 0.001, ?, ?, '[]')",
                       (rid, model, role, ms / 2, tin, tout))
    db.commit()
    db.close()


@pytest.fixture
def log(tmp_path):
    """Two files (a rotated one, then the current one): 10 requests a day apart, then 5 in the last hour."""
    old = [(NOW - (10 - i) * 86400, f"old{i}", "acme", 200, "cheap", 0.002, 100.0 + i, None,
            [("cheap", "first", 1000, 50)]) for i in range(10)]
    new = [(NOW - 3000 + i * 600, f"new{i}", "beta" if i % 2 else "acme", 200 if i < 4 else 503, "cheap",
            0.001, 200.0 + 10 * i, "disagree" if i == 0 else "agree" if i == 1 else None,
            [("cheap", "first", 2000, 40), ("big", "explore", 2100, 100)]) for i in range(5)]
    write_log(tmp_path / "decisions.1000.sqlite", old)
    write_log(tmp_path / "decisions.sqlite", new)
    return tmp_path


def test_a_session_cookie_is_signed_expires_and_names_only_the_key_id():
    s = Sessions(b"x" * 32, max_age_s=60)
    cookie = s.issue("ops", now=NOW)
    assert s.key_id_of(cookie, now=NOW + 59) == "ops" and s.key_id_of(cookie, now=NOW + 60) is None
    assert Sessions(b"y" * 32).key_id_of(cookie, now=NOW) is None  # another secret
    payload, sig = cookie.split(".")
    assert s.key_id_of(payload + "." + sig[:-1] + ("0" if sig[-1] != "0" else "1"), now=NOW) is None
    for junk in (None, "", "a.b.c", "!!!." + sig):
        assert s.key_id_of(junk, now=NOW) is None
    with pytest.raises(ValueError, match="at least 16"):
        Sessions(b"short")
    assert Sessions.from_env({"SWITCHCRAFT_CONSOLE_SECRET": "z" * 20}).key_id_of(
        Sessions(b"z" * 20).issue("ops", now=NOW), now=NOW) == "ops"


@pytest.mark.parametrize("since, expected", [(0.0, 15), (NOW - 3600, 5), (NOW - 3 * 86400, 8), (NOW - 3 * 86400 + 1, 7), (NOW + 1, 0)])
def test_a_range_spans_the_rotated_files_and_holds_exactly_its_requests(log, since, expected):
    with open_log(log, since) as db:
        assert db.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == expected
        assert db.execute("SELECT MIN(ts) >= ? OR COUNT(*) = 0 FROM requests", (since,)).fetchone()[0]


def test_savings_price_every_answered_request_at_the_reference(log):
    since = NOW - 3600
    with open_log(log, since) as db:
        s = savings(db, POOL, since=since, reference="big", now=NOW)
    # 4 answered requests (one 503), 2,000 input tokens each (the explore answer is not the request's),
    # output at big's mean logged output (100 tokens).
    assert s["requests"] == 4 and s["spent_usd"] == pytest.approx(0.004)
    assert s["reference"]["output_tokens"] == 100
    assert s["reference_usd"] == pytest.approx((4 * 2000 * 5.0 + 4 * 100 * 15.0) / 1e6)
    assert s["saved_usd"] == pytest.approx(s["reference_usd"] - 0.004)
    assert {r["group"]: r["requests"] for r in s["per_key"]} == {"acme": 2, "beta": 2}
    assert s["explore_calls"] == 5 and s["explore_usd"] == pytest.approx(0.005)
    assert counterfactual_usd(s["reference"], 1, 1000) == pytest.approx((1000 * 5.0 + 100 * 15.0) / 1e6)


def test_traffic_and_cascades_count_what_the_log_holds(log):
    with open_log(log, 0.0) as db:
        t = traffic(db, since=0.0, now=NOW)
        c = cascades(db, since=0.0)
    assert t["requests"] == 15 and t["errors"] == [{"status": 503, "requests": 1}]
    assert {m["name"]: m["requests"] for m in t["models"]} == {"cheap": 15}
    assert sum(r["requests"] for r in t["over_time"]) == 15 and len(t["over_time"]) == 11  # 10 days + today
    assert t["latency"]["request_p50_ms"] == pytest.approx(106, rel=0.02)  # 14 answered: 100…109, 200…230
    assert c["cascades"] == 2 and c["verdicts"] == {"agree": 1, "disagree": 1}
    assert c["kinds"] == [{"kind": "arguments", "requests": 1}] and c["agreement"]["mean"] == 0.5


def test_latency_quantiles_are_within_the_histograms_resolution():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (g TEXT, latency_ms REAL)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [("a", float(v)) for v in range(1, 1001)] + [("b", 5.0)] * 3)
    q = quantiles(db, "FROM t WHERE 1", by="g")
    assert q["a"][0.5] == pytest.approx(500, rel=0.013) and q["a"][0.99] == pytest.approx(990, rel=0.013)
    assert q["b"][0.5] == pytest.approx(5, rel=0.02)
    assert wilson(0, 0) == (0.0, 1.0) and wilson(7, 7)[1] == 1.0 and 0.64 < wilson(7, 7)[0] < 0.65


def test_charts_escape_their_labels_and_are_standalone_svg():
    svg = charts.bars([("<script>alert(1)</script>", 3)], title="a & b", unit="requests")
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "a &amp; b" in svg
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert "no data" in charts.columns([], {"x": []}, title="t") and "no explored" in charts.intervals(
        [("m", None, 0, 1, 0)], title="t")


# ------------------------------------------------------------------ the summary against the rows it counts

FULL_POOL = load_pool(REPO / "configs" / "pool.yaml")
RANGE_STARTS = (0.0, NOW - 3600, NOW - 86400, NOW - 86400 - 1234.5, NOW - 7 * 86400, NOW - 30, NOW + 1)


def same(a, b, where="") -> None:
    """Equal, floats to 1e-9 (sums added in another order)."""
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def figures(folder, since, raw_only):
    with open_log(folder, since) as db:
        return {"savings": savings(db, FULL_POOL, since=since, reference="gpt-4-0613", now=NOW,
                                   raw_only=raw_only),
                "traffic": traffic(db, since=since, now=NOW, raw_only=raw_only),
                "cascades": cascades(db, since=since, now=NOW, raw_only=raw_only),
                "versions": router_versions(db, since=since, now=NOW, raw_only=raw_only)}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """3,000 requests over 3 days (5% explored) through the gateway's log writer, rotating into several files."""
    folder = tmp_path_factory.mktemp("summary_log")
    log = DecisionLog(folder, max_mb=1.0, keep=8)
    for batch in synthetic_records(FULL_POOL, 3000, 3.0, now=NOW, explore=0.05, seed=1, batch=40):
        log.write(batch)
    log.db.close()
    return folder


def test_the_writer_keeps_a_summary_in_every_file_it_writes(written):
    files = log_files(written)
    assert len(files) >= 3
    for path in files:
        db = sqlite3.connect(path)
        assert db.execute("SELECT SUM(n) FROM summary WHERE facet = 'key'").fetchone()[0] == db.execute(
            "SELECT COUNT(*) FROM requests WHERE kind = 'served'").fetchone()[0]
        db.close()


@pytest.mark.parametrize("since", RANGE_STARTS)
def test_whole_hours_from_the_summary_and_edges_from_the_rows_equal_the_rows_alone(written, since):
    summed, raw = figures(written, since, False), figures(written, since, True)
    same(summed, raw)
    with open_log(written, since) as db:
        served = db.execute("SELECT COUNT(*) FROM requests WHERE kind = 'served'").fetchone()[0]
    assert summed["traffic"]["requests"] == served and (served > 0) == (since <= NOW)


def test_a_file_without_a_summary_is_read_from_its_rows_and_the_writer_builds_one_for_its_current_file(
        written, tmp_path):
    before = figures(written, NOW - 2 * 86400, True)
    copy = tmp_path / "log"
    copy.mkdir()
    files = log_files(written)
    for path in files:
        shutil.copy(path, copy / path.name)
    for path in log_files(copy):  # a log written before the summary existed
        db = sqlite3.connect(path)
        db.execute("DROP TABLE summary")
        db.commit()
        db.close()
    same(figures(copy, NOW - 2 * 86400, False), before)
    DecisionLog(copy).db.close()  # the writer opens the current file: builds its summary from its rows
    db = sqlite3.connect(copy / "decisions.sqlite")
    assert db.execute("SELECT COUNT(*) FROM summary").fetchone()[0] > 0
    db.close()
    same(figures(copy, NOW - 2 * 86400, False), before)


def test_the_requests_view_reads_the_newest_rows_first_across_files(written):
    with open_log(written, 0.0) as db:
        rows = search_requests(db, since=0.0)["rows"]
        newest = [r[0] for f in reversed(db.files)
                  for r in db.execute(f"SELECT request_id FROM {f.schema}.requests ORDER BY id DESC")][:50]
        failed = search_requests(db, since=0.0, size=500, status=503)["rows"]
        values = filter_values(db, 0.0, NOW)
    assert [r["request_id"] for r in rows] == newest and len(db.files) >= 3
    assert failed and all(r["status"] == 503 for r in failed)
    assert {"acme-prod", "beta"} <= set(values["key"]) and 200 in values["status"] and 503 in values["status"]


def test_quality_labels_equal_the_consensus_labels_of_the_learn_step(written):
    from data.consensus import consensus_labels
    from serving.console.quality import explored_answers, labels

    with open_log(written, 0.0) as db:
        rows, tools, served, _ = explored_answers(db, 0.0)
    assert len(served) > 50 and all(rid in tools for rid in served)
    names = sorted({r["model"] for r in rows} | set(FULL_POOL.names))
    mine = labels(rows, tools, names)
    theirs = consensus_labels([{k: v for k, v in r.items() if k != "text"} for r in rows], tools, models=names)
    assert mine.frame.equals(theirs.frame) and mine.reliability == theirs.reliability
