"""Sibling fill (serving/tools/siblings.py): the rule, the router option, the per-catalog config and its fit."""

import numpy as np
import pytest

from serving.tools.cards import ToolCard
from serving.tools.catalog import Catalog
from serving.tools.config import RetrievalConfig, SiblingFill, ToolsConfig, load_tools_config
from serving.tools.index import ToolIndex
from serving.tools.policy import AccessPolicy, Caller
from serving.tools.router import ToolRouter
from serving.tools.siblings import head_size, namespace_ids, ranking, sibling_top

CALLER = Caller(tenant="t", roles=["r"])


def test_head_then_siblings_best_first_then_the_rest():
    fused = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0])
    ns = np.array([0, 1, -1, 2, 2, 0, 1])  # cards 0 and 5 share a namespace, 1 and 6, 3 and 4; 2 has none
    assert head_size(0.4, 5) == 2 and head_size(0.5, 10) == 5 and head_size(0.3, 10) == 3 and head_size(0.1, 3) == 1
    assert sibling_top(fused, ns, 0.4, 5).tolist() == [0, 1, 5, 6, 2]
    assert sibling_top(fused, ns, 0.4, 3).tolist() == [0, 1, 5]
    assert ranking(fused, ns, 0.4, 7, 5).tolist() == [0, 1, 5, 6, 2, 3, 4]  # places after k: score order
    assert ranking(fused, ns, None, 7, 5).tolist() == list(range(7))
    # a card that may not be shown (-inf) is never a sibling; missing siblings leave their places to the rest
    hidden = fused.copy()
    hidden[5] = -np.inf
    assert sibling_top(hidden, ns, 0.4, 5).tolist() == [0, 1, 6, 2, 3]
    # the head holds only cards without a namespace: plain score order
    assert sibling_top(fused, np.array([-1, -1, 0, 0, 1, 1, 0]), 0.4, 4).tolist() == [0, 1, 2, 3]


def test_namespace_patterns_decide_which_cards_have_siblings():
    cards = [ToolCard(namespace=ns, name=f"t{i}", description="d") for i, ns in
             enumerate(["mcp_mail", "mcp_mail", "math", "math", ""])]
    assert namespace_ids(cards, ["*"]).tolist() == [0, 0, 1, 1, -1]
    assert namespace_ids(cards, ["mcp_*"]).tolist() == [0, 0, -1, -1, -1]


def test_catalog_retrieval_overrides_per_catalog_and_names_a_bad_field(tmp_path):
    cfg = ToolsConfig(catalog_retrieval={"stabletoolbench": {"sibling_fill": {"head": 0.5}}})
    assert cfg.retrieval_for("stabletoolbench").sibling_fill == SiblingFill(head=0.5, namespaces=["*"])
    assert cfg.retrieval_for("bfcl").sibling_fill is None and cfg.retrieval_for("bfcl") is cfg.retrieval
    assert cfg.retrieval_for("stabletoolbench").rrf_k == cfg.retrieval.rrf_k
    p = tmp_path / "tools.yaml"
    p.write_text("catalog_retrieval:\n  stb: {sibling_fill: {head: 1.5}}\n")
    with pytest.raises(Exception, match=r"catalog_retrieval\.stb\.sibling_fill\.head"):
        load_tools_config(p)
    p.write_text("retrieval:\n  sibling_fill: {head: 0.5, namespace: ['*']}\n")
    with pytest.raises(Exception, match="namespace"):
        load_tools_config(p)
    assert load_tools_config(None, ["retrieval.sibling_fill.head=0.3"]).retrieval.sibling_fill.head == 0.3


# A parcel service with two endpoints (one named in words the request does not use) among single-endpoint trackers.
SERVICE = [("suivi_colis", "latest", "Latest tracking status of a parcel from its tracking number"),
           ("suivi_colis", "count", "Count the records")]
TRACKERS = [(f"carrier{i}", "track", f"Track a {w} parcel shipment by tracking number") for i, w in
            enumerate(["UPS", "FedEx", "DHL", "USPS", "postal", "courier"])]
REQUEST = "What is the latest tracking status of my parcel CA123, and how many tracking records does it have?"


@pytest.fixture(scope="module")
def parcel_index(encoder, tmp_path_factory):
    cards = [ToolCard(namespace=ns, name=n, description=d, risk="read", group="shipping")
             for ns, n, d in SERVICE + TRACKERS]
    return ToolIndex.build(Catalog(cards), tmp_path_factory.mktemp("sib_index"), encoder=encoder)


def _router(index, sibling_fill=None, top_k=4):
    r = RetrievalConfig(top_k=top_k, max_intents=1, sibling_fill=sibling_fill)
    return ToolRouter(index, AccessPolicy(default_max_risk="irreversible"), r)


def test_the_router_exposes_a_shown_endpoints_sibling_only_with_sibling_fill(parcel_index):
    plain = _router(parcel_index).route(REQUEST, CALLER)
    assert "suivi_colis.latest" in plain.tool_keys[:2]  # the service is found among the best two...
    assert "suivi_colis.count" not in plain.tool_keys  # ...but not its other endpoint
    filled = _router(parcel_index, SiblingFill(head=0.5)).route(REQUEST, CALLER)
    assert filled.tool_keys[:2] == plain.tool_keys[:2]  # the head (ceil(0.5 x 4) = 2) stays in score order
    assert filled.tool_keys[2] == "suivi_colis.count"  # the sibling takes the next place
    assert len(filled.tool_keys) == len(plain.tool_keys) == 4
    # a namespace rule that leaves the service out: as without sibling fill
    other = _router(parcel_index, SiblingFill(head=0.5, namespaces=["carrier*"])).route(REQUEST, CALLER)
    assert other.tool_keys == plain.tool_keys


def test_sibling_fill_never_exposes_a_hidden_sibling(parcel_index):
    cards = [c.model_copy(update={"permissions": ["secret"]}) if c.key == "suivi_colis.count" else c
             for c in parcel_index.catalog.cards]
    idx = ToolIndex(Catalog(cards), parcel_index.encoder, parcel_index.tool_vecs, parcel_index.group_vecs,
                    parcel_index.schema_tokens)
    r = ToolRouter(idx, AccessPolicy(default_max_risk="irreversible"),
                   RetrievalConfig(top_k=4, max_intents=1, sibling_fill=SiblingFill(head=0.5)))
    for k in range(1, 9):
        assert "suivi_colis.count" not in r.route(REQUEST, CALLER, top_k_override=k).tool_keys


def test_the_fit_turns_it_on_where_siblings_are_needed_and_off_where_they_are_not(parcel_index):
    from evaluation.tools.data import Query
    from evaluation.tools.sibling_fit import choose, halves, per_query_scores

    r = _router(parcel_index)
    qs = [Query("a", REQUEST, ["suivi_colis.latest", "suivi_colis.count"]),
          Query("b", "Track my DHL parcel shipment", ["carrier2.track"])]
    vecs = [r.index.query_model.encode([q.text]) for q in qs]
    scores = per_query_scores(r, qs, vecs, by_name=False, heads=(None, 0.5), cut=3)  # 8 cards: a cut below 10
    assert scores[None].tolist()[0] < 1.0 and scores[0.5].tolist()[0] == 1.0
    assert choose(scores)[0] == 0.5
    # on the single-tracker query alone sibling fill gains nothing: off stays (ties keep off)
    assert choose(scores, np.array([False, True]))[0] is None
    folds = halves([Query(str(i), "x", ["y"]) for i in range(200)])
    assert set(folds.tolist()) == {0, 1} and 60 < folds.sum() < 140


MORE_TRACKERS = [(f"carrier{i}", "track", f"Track a {w} parcel shipment by tracking number") for i, w in
                 enumerate(["UPS", "FedEx", "DHL", "USPS", "postal", "courier", "Royal Mail", "La Poste", "DPD",
                            "GLS", "Aramex", "Canada Post"])]


def test_tools_eval_applies_each_catalogs_own_setting(tmp_path):
    from evaluation.tools.data import Benchmark, Query
    from evaluation.tools.evaluate import evaluate_retriever

    cards = [ToolCard(namespace=ns, name=n, description=d, risk="read", group="shipping")
             for ns, n, d in SERVICE + MORE_TRACKERS]
    text = "What is the latest tracking status of my parcel CA123, and how many updates has it had?"
    bench = Benchmark("parcels", Catalog(cards), [Query("p:1", text, ["suivi_colis.latest", "suivi_colis.count"], 2)])
    comp = {}
    for label, per_catalog in (("off", {}), ("on", {"parcels": {"sibling_fill": {"head": 0.5}}}),
                               ("other catalog", {"stabletoolbench": {"sibling_fill": {"head": 0.5}}})):
        cfg = ToolsConfig(retrieval=RetrievalConfig(max_intents=1), catalog_retrieval=per_catalog)
        rrows, _, entry = evaluate_retriever(bench, "base", (None, None), cfg, tmp_path, security=False, log=lambda *_: None)
        comp[label] = next(r["value"] for r in rrows if (r["method"], r["subset"], r["metric"], r["match"])
                           == ("hybrid+intents", "all", "comp@10", "exact"))
        assert entry["catalog_retrieval"] == per_catalog.get("parcels", {})
    assert comp == {"off": 0.0, "on": 1.0, "other catalog": 0.0}
