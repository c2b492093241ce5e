"""The savings headline (serving/console/headline.py) on logs written through the gateway's own decision-log writer:
exploration counted in the saving, the reference rule (consensus, router.json, dearest, the operator's), the
flags instead of impossible figures, the interval, money formatting; and `switchcraft traffic report` printing the
same reference, saved share and exploration as the Savings page for one log.

    .venv/bin/python -m pytest -q tests/serving/console/test_headline.py
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from data.pool import Pool, load_pool
from evaluation.bench.console import ADMIN_KEY, ConsoleBenchConfig, _gateway_app
from evaluation.synthetic_log import synthetic_records
from serving.console.headline import MIN_EXPLORED, choose_reference, headline, money
from serving.console.logdb import open_log
from serving.console.quality import quality
from serving.core.decision_log import DecisionLog
from tests.routers import REPO

NOW = 1_796_000_000.0
POOL = Pool.model_validate({"models": [
    {"name": "cheap", "prices": {"input_per_mtok": 0.1, "output_per_mtok": 0.4}},
    {"name": "mid", "prices": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}},
    {"name": "big", "prices": {"input_per_mtok": 5.0, "output_per_mtok": 15.0}},
    {"name": "gpu", "prices": {"gpu_usd_per_hour": 0.0688}},
    {"name": "penny", "prices": {"input_per_mtok": 0.0001, "output_per_mtok": 0.0001}}]})
TOKEN_PRICED = Pool.model_validate({"models": POOL.model_dump()["models"][:3]})


def write(folder, pool, n, *, explore, days=2.0, now=NOW):
    log = DecisionLog(folder, max_mb=1e9)
    for batch in synthetic_records(pool, n, days, now=now, explore=explore, seed=3):
        log.write(batch)
    log.db.close()
    return folder


@pytest.fixture(scope="module")
def explored(tmp_path_factory):
    return write(tmp_path_factory.mktemp("explored"), TOKEN_PRICED, 600, explore=0.15)


def test_money_has_two_decimals_from_a_dollar_and_four_significant_digits_below():
    assert [money(v) for v in (1234.5678, 1.0, 0.88123, 0.0001234567, 0.0, -0.5, None)] == [
        "$1,234.57", "$1.00", "$0.8812", "$0.0001235", "$0.00", "−$0.5000", "—"]


def test_the_saving_counts_exploration_and_the_reference_is_the_consensus_best(explored):
    with open_log(explored, 0.0) as db:
        h = headline(db, TOKEN_PRICED, since=0.0, now=NOW)
        q = quality(db, since=0.0, pool_names=POOL.names)
        explore_usd = db.execute("SELECT SUM(cost_usd) FROM answers WHERE role = 'explore'").fetchone()[0]
        spent = db.execute("SELECT SUM(cost_usd) FROM requests WHERE status = 200").fetchone()[0]
    best = max((m for m in q["per_model"] if m["n"] >= MIN_EXPLORED and m["model"] in TOKEN_PRICED.names),
               key=lambda m: m["mean"])
    assert h["reference_rule"] == "consensus" and h["reference"]["model"] == best["model"]
    assert f"n = {best['n']}" in h["reference_why"]
    assert h["explore_usd"] == pytest.approx(explore_usd) and h["spent_usd"] == pytest.approx(spent)
    assert h["saved_usd"] == pytest.approx(h["reference_usd"] - spent - explore_usd)
    assert h["saved_share"] == pytest.approx(1 - (spent + explore_usd) / h["reference_usd"])
    assert h["gross_saved_usd"] - h["saved_usd"] == pytest.approx(explore_usd)
    assert sum(x["explore_usd"] for x in h["per_hour"]) == pytest.approx(explore_usd)  # the hours resampled
    with open_log(explored, 0.0) as db:
        big = headline(db, TOKEN_PRICED, since=0.0, now=NOW, reference="big")
    assert big["reference_rule"] == "chosen" and not big["flags"] and len(big["per_hour"]) > 40
    low, high = big["interval"]
    assert low <= big["saved_share"] <= high and 0 < high - low < 0.5


def test_without_enough_explored_requests_the_router_then_the_dearest_decide(tmp_path):
    folder = write(tmp_path, POOL, 200, explore=0.0)
    with open_log(folder, 0.0) as db:
        by_router = headline(db, POOL, since=0.0, now=NOW, router_info={"novelty": {"safe_model": "mid"}})
        dearest = headline(db, POOL, since=0.0, now=NOW, router_info={})
    assert (by_router["reference"]["model"], by_router["reference_rule"]) == ("mid", "router")
    assert "router.json novelty.safe_model" in by_router["reference_why"]
    assert (dearest["reference"]["model"], dearest["reference_rule"]) == ("big", "dearest")
    assert by_router["explore_usd"] == 0.0
    with pytest.raises(ValueError, match="not a model of the served pool"):
        choose_reference(POOL, asked="claude-3-opus-20240229")


def test_impossible_figures_are_flagged_with_the_reason_instead_of_printed(explored, tmp_path):
    with open_log(explored, 0.0) as db:
        penny = headline(db, POOL, since=0.0, now=NOW, reference="penny")
        gpu = headline(db, POOL, since=0.0, now=NOW, reference="gpu")
    assert penny["saved_share"] < -1 and penny["interval"] is None
    assert "beyond −100%" in penny["flags"][0]["why"] and "is not shown" in penny["flags"][0]["why"]
    # GPU-priced without gpu_seconds_per_query and never logged: no latency to price it by
    assert gpu["reference_usd"] == 0 and "has no price that applies here" in gpu["flags"][0]["why"]
    few = write(tmp_path, POOL, 12, explore=0.0)
    with open_log(few, 0.0) as db:
        h = headline(db, POOL, since=0.0, now=NOW, reference="big")
    assert h["flags"] == [{"figure": "saved", "why": f"only {h['requests']} answered requests in this range: a saving "
                                                      "is claimed from 30 on"}] and h["interval"] is None


def _shown(html: str, element_id: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', html)
    assert m, f"no #{element_id} on the page"
    return m.group(1).strip()


def test_traffic_report_and_the_savings_page_give_the_same_reference_share_and_exploration(exported, tmp_path):
    pool = load_pool(REPO / "configs" / "pool.yaml")
    now = __import__("time").time()
    log = write(tmp_path / "log", pool, 800, explore=0.2, days=1.5, now=now)
    cfg = ConsoleBenchConfig(router_dir=exported[0], explore=0.2)
    with TestClient(_gateway_app(cfg, pool, log, tmp_path / "state")) as http:
        assert http.post("/console/login", data={"key": ADMIN_KEY}, follow_redirects=False).status_code == 303
        pages = [http.get("/console/savings?range=all").text, http.get("/console/savings?range=all&ref=gpt-4-0613").text]
    config = tmp_path / "serving.yaml"
    config.write_text(f"upstream: {{pool: {REPO / 'configs' / 'pool.yaml'}}}\nrouter: {{dir: {exported[0]}}}\n")
    from switchcraft.cli import app as cli

    for page, extra in zip(pages, ([], ["--reference", "gpt-4-0613"])):
        out = tmp_path / f"out{len(extra)}"
        r = CliRunner().invoke(cli, ["traffic", "report", "--log", str(log), "--out", str(out), "--config",
                                     str(config), "--no-png", *extra])
        assert r.exit_code == 0, r.output
        s = json.loads((out / "traffic.json").read_text())["savings"]
        assert s["reference_rule"] == ("chosen" if extra else "consensus")
        assert _shown(page, "reference-model") == s["reference"]["model"]
        assert _shown(page, "explore") == money(s["explore_usd"]) and s["explore_usd"] > 0
        md = (out / "report.md").read_text()
        assert f"reference: {s['reference']['model']} ({s['reference_rule']}" in md
        assert f"exploration (the cost of learning): {money(s['explore_usd'])}" in md
        if s["flags"]:
            assert _shown(page, "saved") == "not shown" and s["flags"][0]["why"] in md
        else:
            assert _shown(page, "saved") == f"{100 * s['saved_share']:.1f}%" and f"{100 * s['saved_share']:.1f}% [95%" in md
    assert not s["flags"]  # the dearest reference: a saving the page prints
