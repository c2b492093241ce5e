"""Tool-retrieval metrics by hand, and the evaluation pipeline on a tiny in-process benchmark."""

import json

import pytest

from evaluation.tools.data import Benchmark, Query
from evaluation.tools.metrics import comprehensive_at, ndcg_at, recall_at


def test_base_name_strips_only_variant_suffixes():
    from evaluation.tools.evaluate import base_name

    assert [base_name(k) for k in ("hotel_booking~3", "a~b", "x", "math.f~12")] == ["hotel_booking", "a~b", "x", "math.f"]


def test_metrics_by_hand():
    ranked = ["a", "b", "c", "d"]
    assert recall_at(ranked, ["b", "d"], 2) == 0.5
    assert recall_at(ranked, ["b", "d"], 4) == 1.0
    assert comprehensive_at(ranked, ["b", "d"], 3) == 0.0 and comprehensive_at(ranked, ["b", "d"], 4) == 1.0
    # one relevant at rank 2 of one needed: (1/log2 3) / 1
    assert ndcg_at(ranked, ["b"], 10) == pytest.approx(1 / 1.584962500721156)
    assert ndcg_at(ranked, ["a", "b"], 10) == pytest.approx(1.0)
    assert ndcg_at(ranked, ["z"], 10) == 0.0
    with pytest.raises(ValueError):
        recall_at(ranked, [], 5)


def test_evaluation_on_a_tiny_benchmark(cards_file, encoder, tmp_path):
    from evaluation.tools.evaluate import retrieval_rows, routing_rows, security_check
    from evaluation.tools.report import write_report
    from serving.tools.catalog import Catalog
    from serving.tools.config import ToolsConfig
    from serving.tools.index import ToolIndex
    from serving.tools.loaders import load_cards
    from serving.tools.policy import AccessPolicy
    from serving.tools.router import ToolRouter

    cards, groups = load_cards(cards_file)
    cards = [c.model_copy(update={"permissions": [], "tenants": [], "environments": [], "health": "healthy"}) for c in cards]
    bench = Benchmark("tiny", Catalog(cards, groups), [
        Query("t:1", "what is the status of payment 42", ["payments.get_payment_status"], 1, "s"),
        Query("t:2", "weather forecast for Paris", ["weather.forecast"], 1, "s"),
        Query("t:3", "charge the card then issue an invoice", ["payments.charge_card", "invoices.issue_invoice"], 2, "m"),
    ])
    index = ToolIndex.build(bench.catalog, tmp_path / "index", encoder=encoder)
    qvecs = encoder.encode([q.text for q in bench.queries])
    rows = retrieval_rows(bench, index, qvecs, 60.0)
    assert {r["match"] for r in rows} == {"exact"}  # no schema variants here
    get = {(r["method"], r["subset"], r["metric"]): r["value"] for r in rows}
    assert get[("hybrid", "single", "recall@1")] == 1.0
    assert get[("hybrid", "all", "recall@50")] == 1.0 and get[("dense", "multi", "comp@10")] == 1.0
    cfg = ToolsConfig()
    router = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"), cfg.retrieval, cfg.groups)
    routing, extra = routing_rows(bench, router, qvecs)
    all_row = next(r for r in routing if r["subset"] == "all")
    assert all_row["n"] == 3 and all_row["exposed"] == 5.0  # 8 tools, K = 5
    assert all_row["comp_after"] == 1.0 and 0 < all_row["token_reduction"] < 1
    sec = security_check(bench, index, cfg, n_targets=5)
    assert sec["unauthorised_exposures"] == 0 and sec["adversarial_queries"] == 2 * min(5, sec["restricted_tools"])
    results = {"config": {}, "limit": None, "retrieval": rows, "routing": routing,
               "benchmarks": {"tiny": {"tools": 8, "groups": 4, "queries": 3, "catalog_version": bench.catalog.version,
                                       "security": sec, **extra}}}
    write_report(results, tmp_path / "run")
    report = (tmp_path / "run" / "report.md").read_text()
    assert "### tiny — multi" in report and "| hybrid | 1 |" in report
    assert (tmp_path / "run" / "recall_at_k.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["benchmarks"]["tiny"]["security"]["unauthorised_exposures"] == 0


def test_side_by_side_table_shows_each_retriever_per_domain():
    import pandas as pd

    from evaluation.tools.report import side_by_side_table

    rows = []
    for retriever, r5 in (("base", 0.5), ("trained", 0.75)):
        for subset in ("single", "domain:in:single", "domain:out:single"):
            for metric, v in (("recall@5", r5), ("comp@10", r5 / 2)):
                rows.append({"benchmark": "metatool", "match": "exact", "method": "hybrid+intents", "subset": subset,
                             "metric": metric, "value": v, "n": 4, "retriever": retriever})
    table = side_by_side_table(pd.DataFrame(rows), ["base", "trained"])
    assert "| base: R@5 / C@10 | trained: R@5 / C@10 |" in table
    assert "| MetaTool single | all | 4 | 0.500 / 0.250 | 0.750 / 0.375 |" in table
    assert "| MetaTool single | in | 4 |" in table and "| MetaTool single | out | 4 |" in table


def test_held_out_reading_drops_training_queries_and_domains_are_reported(cards_file, encoder, tmp_path):
    from evaluation.tools.evaluate import retrievers_of, retrieval_rows
    from serving.tools.catalog import Catalog
    from serving.tools.config import ToolsConfig
    from serving.tools.index import ToolIndex
    from serving.tools.loaders import load_cards

    cards, groups = load_cards(cards_file)
    bench = Benchmark("tiny", Catalog(cards, groups), [
        Query("t:1", "what is the status of payment 42", ["payments.get_payment_status"], 1, "s", "in"),
        Query("t:2", "weather forecast for Paris", ["weather.forecast"], 1, "s", "out")])
    index = ToolIndex.build(bench.catalog, tmp_path / "index", encoder=encoder)
    rows = retrieval_rows(bench, index, encoder.encode([q.text for q in bench.queries]), 60.0)
    subsets = {r["subset"]: r["n"] for r in rows if r["metric"] == "recall@5" and r["method"] == "hybrid"}
    assert subsets["domain:in"] == subsets["domain:out:single"] == 1 and subsets["all"] == 2
    assert list(retrievers_of(ToolsConfig())) == ["base"]
    both = retrievers_of(ToolsConfig(encoder="runs/x/model", query_encoder="runs/x/query_model"))
    assert both == {"base": (None, None), "trained": ("runs/x/model", "runs/x/query_model")}
    with pytest.raises(KeyError, match="trained needs"):
        retrievers_of(ToolsConfig(), ["trained"])


def test_fusion_score_is_the_mean_of_recall_and_comprehensiveness(cards_file, encoder, tmp_path):
    from evaluation.tools.fusion import _score
    from serving.tools.catalog import Catalog
    from serving.tools.index import ToolIndex
    from serving.tools.loaders import load_cards
    from serving.tools.policy import AccessPolicy
    from serving.tools.router import ToolRouter

    cards, groups = load_cards(cards_file)
    index = ToolIndex.build(Catalog(cards, groups), tmp_path / "index", encoder=encoder)
    router = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"))
    keys = [c.key for c in index.catalog.cards]
    text = "weather forecast for Paris"
    prepared = [([text], encoder.encode([text]), [index.bm25_scores(text)], ["weather.forecast"]),
                ([text], encoder.encode([text]), [index.bm25_scores(text)], ["weather.forecast", "nope.tool"])]
    # first: found (1 + 1) / 2; second: half the needed tools in the top 5, not all in the top 10 → (0.5 + 0) / 2
    assert _score(router, prepared, keys, by_name=False) == (1.0 + 0.25) / 2
