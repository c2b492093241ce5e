"""The end-to-end value estimate (evaluation/tools/value.py): recorded curves, the estimate, per-query check."""

import json

import numpy as np
import pytest

from data.errors import DataError
from evaluation.tools.value import (Routed, check_per_query, curve_checks, estimate, parse_results,
                                   read_curves, read_predictions, read_prices, value_rows, wilson)

RESULTS = """Category Scaling Evaluation Results
====================================

Model: model-a
---
  Category: multiple
    Pool 0: 90.00%
    Pool 16: 80.00%
    Pool 128: 50.00%

  Category: parallel
    Pool 0: 100.00%
    Pool 16: 60.00%
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_parse_results_reads_every_curve(tmp_path):
    curves = parse_results(_write(tmp_path, "r.txt", RESULTS))
    assert curves == {("model-a", "multiple"): {0: 0.9, 16: 0.8, 128: 0.5}, ("model-a", "parallel"): {0: 1.0, 16: 0.6}}


def test_parse_results_names_the_bad_line(tmp_path):
    bad = RESULTS.replace("Pool 16: 60.00%", "Pool sixteen: 60%")
    with pytest.raises(DataError, match=r"r.txt:13:"):
        parse_results(_write(tmp_path, "r.txt", bad))
    with pytest.raises(DataError, match="outside"):
        parse_results(_write(tmp_path, "r.txt", RESULTS.replace("50.00%", "150.00%")))


def test_read_curves_requires_agreement(tmp_path):
    _write(tmp_path, "a.txt", RESULTS)
    _write(tmp_path, "b.txt", RESULTS)
    assert len(read_curves(tmp_path, ("a.txt", "b.txt"))) == 2
    _write(tmp_path, "b.txt", RESULTS.replace("80.00%", "81.00%"))
    with pytest.raises(DataError, match="differs"):
        read_curves(tmp_path, ("a.txt", "b.txt"))


def _r(i, hit, offered, own=1, category="multiple", tokens=100):
    return Routed(id=f"q{i}", category=category, own=own, offered=offered, hit=hit, hit_name=hit, hit_after=hit,
                  tokens_router=tokens, tokens_own=50)


def test_estimate_is_recall_times_accuracy_at_the_offered_size():
    curve = {0: 0.9, 16: 0.8, 128: 0.5}
    # 3 of 4 hit; 9 tools offered with 1 own doc = 8 distractors → 0.85
    routed = [_r(i, i % 4 != 3, 9) for i in range(40)]
    e = estimate(routed, curve, n_recorded=200, resamples=300)
    assert e["estimate"] == pytest.approx(0.75 * 0.85)
    lo, hi = e["interval"]
    assert lo < e["estimate"] < hi and hi - lo < 0.35
    # the agent's second turn: hits after request_group, at the larger set offered (1 own + 17 → 16 distractors)
    after = [Routed(id="a", category="multiple", own=1, offered=9, hit=False, hit_name=False, hit_after=True,
                    tokens_router=1, tokens_own=1, offered_after=17)]
    assert estimate(after, curve, 200, resamples=50, field="hit_after", size="offered_after")["estimate"] == (
        pytest.approx(0.8))
    # fewer tools offered than the question's own docs: accuracy at pool 0
    assert estimate([_r(0, True, 2, own=4)], curve, 200, resamples=50)["estimate"] == pytest.approx(0.9)


def test_value_rows_compare_with_the_recorded_pool(tmp_path):
    curves = {("model-a", "multiple"): {0: 0.9, 16: 0.8, 128: 0.5}}
    routed = [_r(i, True, 1) for i in range(20)]
    tokens = {("multiple", 128): np.full(20, 9000.0)}
    rows = value_rows(routed, curves, {"multiple": 200}, tokens, {"model-a": 2.5}, pools=(128, 512), resamples=200)
    assert len(rows) == 1  # 512 is not recorded for this curve
    r = rows[0]
    assert r["acc_without"] == 0.5 and r["acc_router"] == pytest.approx(0.9)
    assert r["acc_router_after"] == pytest.approx(0.9)  # every question complete; offered_after 0 → pool 0
    assert r["gain"] == pytest.approx(0.4) and r["gain_ci"][0] > 0.3
    assert r["acc_without_ci"] == pytest.approx(list(wilson(100, 200)))
    assert r["tokens_without"] == 9000 and r["tokens_router"] == 100
    assert r["usd_per_1k_without"] == pytest.approx(9000 * 2.5 / 1e3)


def test_wilson_matches_the_textbook_interval():
    lo, hi = wilson(97, 200)
    assert lo == pytest.approx(0.4162, abs=1e-3) and hi == pytest.approx(0.5545, abs=1e-3)


def test_curve_checks_flag_rises_beyond_noise():
    curves = {("m", "multiple"): {0: 0.5, 16: 0.9, 32: 0.85}}
    c = curve_checks(curves, {"multiple": 200})
    assert c["rises"] == 1 and c["rises_outside_noise"] == ["m/multiple: 0→16"]
    assert curve_checks({("m", "multiple"): {0: 0.5025}}, {"multiple": 200})["not_whole"] == ["m/multiple/0"]


def test_read_predictions_and_prices(tmp_path):
    p = _write(tmp_path, "predictions_m_pool0.jsonl",
               '{"test_id": "a", "prediction": {"name": "f"}}\n{"test_id": "b", "prediction": null}\n'
               '{"test_id": "c", "prediction": [{"name": "g"}]}\n')
    assert read_predictions(p) == {"a": "f", "b": None, "c": "g"}
    _write(tmp_path, "bad.jsonl", '{"test_id": "a", "prediction": {"name": "f"}}\nnot json\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2:"):
        read_predictions(tmp_path / "bad.jsonl")
    prices = _write(tmp_path, "p.json", json.dumps({"models": {"m": {"input_per_mtok": 0.15}}}))
    assert read_prices(prices, ["other=2.5"]) == {"m": 0.15, "other": 2.5}
    with pytest.raises(DataError, match="MODEL=USD"):
        read_prices(None, ["other"])


def test_check_per_query_separates_the_router_misses_from_the_model_failures():
    # 4 questions; the router misses q3; with distractors the model fails q2 (calling a tool the router
    # exposes) and q3 (calling one it does not).
    routed = [_r(i, i != 3, 5) for i in range(4)]
    needed = {f"q{i}": "f" for i in range(4)}
    exposed = {f"q{i}": {"f", "g"} for i in range(4)}
    preds = {0: {f"q{i}": "f" for i in range(4)},
             16: {"q0": "f", "q1": "f", "q2": "g", "q3": "h"}}
    c = check_per_query(routed, needed, exposed, preds, resamples=200)
    assert c["n"] == 4 and c["name_accuracy"] == {0: 1.0, 16: 0.5}
    # 4 distractors: acc(4) = 1 - 0.5 * 4/16 = 0.875 on the curve; per query 1, 1, 0.75, (0.75 on q3, a miss)
    assert c["product"] == pytest.approx(0.75 * 0.875)
    assert c["per_query"] == pytest.approx((1 + 1 + 0.75) / 4)
    assert c["confusions"][16] == {"lost": 2, "called_a_tool_the_router_exposes": 1, "no_call": 0}


@pytest.fixture(scope="module")
def tiny_router(tmp_path_factory):
    from serving.tools.encoder import MiniLMEncoder
    from serving.tools.policy import AccessPolicy
    from serving.tools.router import ToolRouter
    from tests.catalogs import build_tiny_index

    index = build_tiny_index(MiniLMEncoder.load(), tmp_path_factory)
    grants = {"eval": ["payments.read", "payments.refund", "payments.write", "invoices.write"]}
    from serving.tools.config import GroupConfig, RetrievalConfig

    return ToolRouter(index, AccessPolicy(role_permissions=grants, default_max_risk="irreversible"),
                      RetrievalConfig(top_k=1, k_per_intent=1), GroupConfig(max_groups=1, confidence_threshold=0.0,
                                                                            min_confidence=0.0))


def test_route_recorded_counts_hits_offered_tools_and_tokens(tiny_router):
    from evaluation.tools.data import Benchmark, Query
    from evaluation.tools.value import route_recorded

    cat = tiny_router.catalog
    keys = {c.name: c.key for c in cat.cards}
    qs = [Query("multiple_0", "Refund the captured payment back to the customer's card", [keys["refund_payment"]],
                split="bfcl_v4:multiple", offered=[keys["refund_payment"], keys["charge_card"]]),
          Query("multiple_1", "Charge my credit card", [keys["list_invoices"]], split="bfcl_v4:multiple",
                offered=[keys["list_invoices"]])]
    bench = Benchmark("t", cat, qs)
    vecs = [np.atleast_2d(tiny_router.index.query_model.encode([q.text])[0]) for q in qs]
    r0, r1 = route_recorded(bench, tiny_router, vecs)
    assert r0.hit and r0.hit_name and r0.own == 2 and r0.category == "multiple"
    assert not r1.hit and r1.hit_after  # the simulated request_group brings the invoices group in
    assert r1.offered_after > r1.offered and r0.offered_after == r0.offered
    d = tiny_router.route(qs[0].text, __import__("evaluation.tools.evaluate", fromlist=["EVAL_CALLER"]).EVAL_CALLER,
                          qvecs=vecs[0])
    count = tiny_router.index.encoder.count_tokens
    assert r0.offered == len(d.tool_keys) + 1
    assert r0.tokens_router == count(qs[0].text) + d.schema_tokens["exposed"]
    pos = cat.position
    assert r0.tokens_own == count(qs[0].text) + int(sum(tiny_router.index.schema_tokens[pos[k]] for k in qs[0].offered))
