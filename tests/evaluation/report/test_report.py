"""The report on a synthetic run: files written, numbers equal to ones computed here by hand."""

import json

import numpy as np
import pandas as pd
import pytest

from data.schema import Example, Expected, Label, Message, Tool
from evaluation.report.evaluate import run_evaluation
from evaluation.report.report import write_report

MODELS = ["big", "small"]


def _run(n=60, seed=0):
    rng = np.random.default_rng(seed)
    examples, labels, oof = {}, [], []
    for i in range(n):
        eid = f"t:{i}"
        cat = "easy" if i % 2 else "hard"
        examples[eid] = Example(id=eid, source="t", category=cat, messages=[Message(role="user", content=f"{cat} question {i}")],
                                tools=[Tool(name="f")], expected=Expected.nothing())
        big_ok = rng.random() < 0.9
        small_ok = cat == "easy" and rng.random() < 0.8
        labels += [Label(example_id=eid, model="big", correct=big_ok, reason="ok", cost_usd=0.01),
                   Label(example_id=eid, model="small", correct=small_ok, reason="ok", cost_usd=0.001)]
        fold = i % 3
        oof += [{"example_id": eid, "fold": fold, "model": "big", "prob": 0.9},
                {"example_id": eid, "fold": fold, "model": "small", "prob": 0.8 if cat == "easy" else 0.1}]
    return examples, labels, pd.DataFrame(oof)


def test_report_numbers_match_hand_computation(tmp_path):
    examples, labels, oof = _run()
    ev = run_evaluation(labels, examples, oof, MODELS)
    path = write_report(ev, tmp_path)
    assert path.exists() and (tmp_path / "cost_accuracy_tau.png").stat().st_size > 10_000
    m = json.loads((tmp_path / "metrics.json").read_text())
    rows = {r["routing"]: r for r in m["headline"]}
    by = {(lb.example_id, lb.model): lb for lb in labels}
    ids = sorted(examples)
    # the router at τ=0.5 sends easy to small (0.8 > 0.5, cheaper) and hard to big
    chosen = ["small" if examples[e].category == "easy" else "big" for e in ids]
    acc = np.mean([by[(e, c)].correct for e, c in zip(ids, chosen)])
    cost = np.mean([by[(e, c)].cost_usd for e, c in zip(ids, chosen)])
    r = rows["switchcraft router (τ = 0.5)"]
    assert r["accuracy"] == pytest.approx(acc) and r["usd_per_million"] == pytest.approx(cost * 1e6)
    oracle_acc = np.mean([by[(e, "big")].correct or by[(e, "small")].correct for e in ids])
    assert rows["oracle"]["accuracy"] == pytest.approx(oracle_acc)
    best_acc = np.mean([by[(e, "big")].correct for e in ids])
    assert rows["best single model"]["accuracy"] == pytest.approx(best_acc)
    assert r["savings_vs_best"] == pytest.approx(1 - cost / 0.01)
    cats = {c["category"]: c for c in m["per_category"]}
    assert cats["hard"]["n"] == 30
    assert "TF-IDF + LR (τ for best-single accuracy)" in rows and "switchcraft router (τ for ≤ 10% of best-single cost)" in rows
    assert "| oracle |" in path.read_text()


def test_the_router_is_set_against_the_category_prior_paired(tmp_path):
    # The toy router's probabilities are exactly its category's (0.9 / 0.8 or 0.1), so it routes like the prior
    # wherever the prior's training-fold rates order the models the same way: the two rows must then agree.
    examples, labels, oof = _run()
    ev = run_evaluation(labels, examples, oof, MODELS)
    write_report(ev, tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    rows = {r["target"]: r for r in m["router_vs_category_prior"]}
    assert set(rows) == {"best-single accuracy", "≤ 10% of best-single cost"}
    head = {r["routing"]: r for r in m["headline"]}
    for target, r in rows.items():
        router = head[f"switchcraft router, λ rule (λ for {target})"]
        prior = head[f"category prior (reference: BFCL category known), λ rule (λ for {target})"]
        assert r["router"] == pytest.approx([router["accuracy"], router["usd_per_million"]])
        assert r["prior"] == pytest.approx([prior["accuracy"], prior["usd_per_million"]])
        d, lo, hi = r["delta_accuracy"]
        assert d == pytest.approx(router["accuracy"] - prior["accuracy"]) and lo <= d <= hi
        assert r["reached"] == (hi >= 0 and r["delta_usd_per_million"][1] <= 0)
        c = r["curve_at_prior_cost"]
        assert c["delta"][0] == pytest.approx(c["router"] - c["prior"]) and c["not_below"] == (c["delta"][2] >= 0)
    text = (tmp_path / "report.md").read_text()
    assert "## The router against the category prior" in text and "curves at the prior's cost" in text


def test_a_router_that_is_the_prior_reaches_it_on_every_row(tmp_path):
    from evaluation.offline.category_prior import category_prior_probs
    from evaluation.report.evaluate import PRIOR, ROUTER, router_vs_prior
    from evaluation.offline.routing_eval import evaluate_router

    examples, labels, oof = _run(n=90, seed=3)
    ev = run_evaluation(labels, examples, oof, MODELS)
    ev.probs[ROUTER] = category_prior_probs(ev.data.categories, ev.data.correct, ev.data.folds)
    for t in ev.lambda_rule:  # the router's λ rows recomputed from the prior's probabilities
        ev.lambda_rule[t][ROUTER] = evaluate_router(ROUTER, ev.probs[ROUTER], ev.data, target=t, rule="lambda")
    rows = router_vs_prior(ev, resamples=300)
    assert len(rows) == 2 and PRIOR in ev.probs
    for r in rows:
        assert r["reached"] and r["delta_accuracy"][0] == 0 and r["delta_usd_per_million"][0] == 0
        assert r["curve_at_prior_cost"]["delta"] == [0.0, 0.0, 0.0]
