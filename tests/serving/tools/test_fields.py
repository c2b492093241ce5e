"""Per-field retrieval (name, description, parameters) on real catalogs: BM25 per field, dense per field,
their weights in the fusion, the config that turns them on, and the fit that learns them.

Unset per-field weights must give today's two-signal fusion bit for bit (checked against
that formula written out here), and the permission filter still decides first: zero
unauthorised exposures with every per-field ranking on.
"""

from collections import Counter

import numpy as np
import pytest

from data.errors import DataError
from serving.tools.cards import FIELDS, search_fields, search_text
from serving.tools.catalog import Catalog
from serving.tools.config import FieldWeights, RetrievalConfig, ToolsConfig, load_tools_config
from serving.tools.index import ToolIndex, bm25_tokens, rrf_fuse, top_k
from serving.tools.policy import AccessPolicy
from serving.tools.router import ToolRouter
from tests.catalogs import build_tiny_index

ALL_FIELDS = {"w_bm25_fields": FieldWeights(name=0.5, description=0.25, parameters=0.25),
              "w_dense_fields": FieldWeights(name=0.25, description=0.25, parameters=0.25)}


def two_signal_rrf(bm25, dense, candidates, k, w_bm25, w_dense):
    """The fusion as it was before per-field weights (the reference for 'unset changes nothing')."""
    fused = np.full(len(dense), -np.inf, dtype=np.float64)
    idx = np.flatnonzero(candidates)
    if idx.size == 0:
        return fused
    total = np.zeros(idx.size, dtype=np.float64)
    for scores, w in ((bm25, w_bm25), (dense, w_dense)):
        if w == 0:
            continue
        s = scores[idx]
        ranks = np.empty(idx.size, dtype=np.float64)
        ranks[np.argsort(-s, kind="stable")] = np.arange(1, idx.size + 1)
        contrib = w / (k + ranks)
        if scores is bm25:
            contrib[s <= 0] = 0.0
        total += contrib
    fused[idx] = total
    return fused


@pytest.fixture(scope="module")
def bfcl_catalog(shared_data):
    """The repo config's catalog: BFCL's 2,405 function docs (variants kept as name~2, …)."""
    return Catalog.from_files([str(shared_data / "bfcl_v4_outputs/thousand_tools/all_unique_functions.json")],
                              default_risk="read", duplicates="rename")


@pytest.fixture(scope="module")
def bfcl_lexical(bfcl_catalog):
    """The BFCL catalog's BM25 indexes (no embeddings: these tests read only the lexical side)."""
    n = len(bfcl_catalog)
    return ToolIndex(bfcl_catalog, None, np.zeros((n, 384), np.float32), np.zeros((len(bfcl_catalog.groups), 384)),
                     np.zeros(n, np.int64))


@pytest.fixture(scope="module")
def metatool(shared_data, encoder, tmp_path_factory):
    """MetaTool's 199 real tools embedded with the base MiniLM, and its real queries."""
    from evaluation.tools.data import read_benchmark

    bench = read_benchmark("metatool", shared_data)
    index = ToolIndex.build(bench.catalog, tmp_path_factory.mktemp("index"), encoder=encoder)
    single = [q.text for q in bench.queries if q.split == "single"][:20]
    multi = [q.text for q in bench.queries if q.split == "multi"][:20]
    return bench, index, single + multi


def test_the_fields_partition_the_search_text(bfcl_catalog):
    """Every word BM25 reads in a card's whole text is in exactly one field, and nothing else is
    (but the `~2` of a renamed variant, which is no word of its name)."""
    import Stemmer

    stem = Stemmer.Stemmer("english")
    renamed = 0
    for card in bfcl_catalog.cards:
        f = search_fields(card)
        assert set(f) == set(FIELDS)
        whole = Counter(bm25_tokens(search_text(card), stem))
        parts = sum((Counter(bm25_tokens(f[x], stem)) for x in FIELDS), Counter())
        if "~" in card.name:
            renamed += 1
            whole -= Counter([card.name.rpartition("~")[2]])
            assert "~" not in f["name"]
        assert whole == parts, card.key
    assert renamed > 1000  # the catalog does hold variants: the suffix rule was exercised
    card = bfcl_catalog.cards[bfcl_catalog.position["solve_quadratic~2"]]
    assert search_fields(card)["name"] == "solve quadratic"
    assert search_fields(card)["parameters"].startswith("a Coefficient of x")


@pytest.mark.slow
def test_unset_field_weights_reproduce_the_two_signal_fusion_exactly(metatool):
    bench, index, queries = metatool
    rng = np.random.default_rng(0)
    masks = [np.ones(len(index.catalog), bool), rng.random(len(index.catalog)) < 0.5]
    zero = RetrievalConfig(w_bm25_fields=FieldWeights(), w_dense_fields=FieldWeights(name=0, parameters=0.0))
    assert zero == RetrievalConfig() and not zero.w_bm25_fields.weighted()
    assert not load_tools_config("configs/tools.yaml").retrieval.w_bm25_fields.weighted()
    for text in queries:
        bm25, dense = index.scores(text)
        for mask in masks:
            for k, wb, wd in ((60.0, 1.0, 1.0), (10.0, 0.5, 1.0), (30.0, 0.0, 1.0), (10.0, 1.5, 0.0)):
                want = two_signal_rrf(bm25, dense, mask, k, wb, wd)
                assert np.array_equal(rrf_fuse(bm25, dense, mask, k, wb, wd), want)
                zero_extra = [(bm25, 0.0, bm25 > 0), (dense, 0.0, None)]
                assert np.array_equal(rrf_fuse(bm25, dense, mask, k, wb, wd, zero_extra), want)
    # The router's multi-intent fusion, default weights vs explicit zeros vs the old formula.
    r = RetrievalConfig(rrf_k=10, w_bm25=0.5)
    a = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"), r)
    b = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"),
                   r.model_copy(update={"w_bm25_fields": FieldWeights(), "w_dense_fields": FieldWeights()}))
    everything = np.ones(len(index.catalog), bool)
    split = 0
    for text in queries:
        texts = a.intents(text)
        split += len(texts) > 1
        Q = index.encoder.encode(texts)
        fused, best_cos = a.fuse(texts, Q, everything)
        parts = [two_signal_rrf(index.bm25_scores(t), index.tool_vecs @ Q[j], everything, 10.0, 0.5, 1.0)
                 for j, t in enumerate(texts)]
        want = parts[0]
        if len(texts) > 1:
            want = np.max([parts[0], *[r.intent_weight * p for p in parts[1:]]], axis=0) + 1e-3 * parts[0]
        assert np.array_equal(fused, want)
        assert np.array_equal(b.fuse(texts, Q, everything)[0], want)
        assert [d.tool_keys for d in (a.route(text, a_caller()), b.route(text, a_caller()))] == \
            [a.route(text, a_caller()).tool_keys] * 2
    assert split >= 5  # multi-intent queries were among them


def a_caller():
    from serving.tools.policy import Caller

    return Caller(tenant="eval", roles=("eval",))


def test_a_field_ranking_adds_its_weighted_reciprocal_rank(bfcl_lexical):
    """rrf_fuse(extra=...) = the two-signal sum + w / (k + rank) for each credited card, ranks taken
    among the candidates; a card a field's BM25 does not match gets nothing from it."""
    index = bfcl_lexical
    n = len(index.catalog)
    mask = np.random.default_rng(1).random(n) < 0.7
    idx = np.flatnonzero(mask)
    for text in ("find the roots of a quadratic equation", "book a hotel room in Paris for two nights",
                 "convert 100 US dollars to euros"):
        bm25 = index.bm25_scores(text)
        fields = index.field_bm25_scores(text, FIELDS)
        dense = -np.arange(n, dtype=np.float32)  # any fixed ranking: the dense side is not under test here
        base = rrf_fuse(bm25, dense, mask, 10.0, 0.5, 1.0)
        w = {"name": 0.5, "description": 0.25, "parameters": 0.125}
        got = rrf_fuse(bm25, dense, mask, 10.0, 0.5, 1.0, [(fields[f], w[f], fields[f] > 0) for f in FIELDS])
        want = base.copy()
        for f in FIELDS:
            s = fields[f]
            order = sorted(idx, key=lambda i: (-s[i], i))  # stable: ties keep catalog order
            for rank, i in enumerate(order, start=1):
                if s[i] > 0:
                    want[i] += w[f] / (10.0 + rank)
        np.testing.assert_allclose(got[idx], want[idx], rtol=1e-12)
        assert np.all(np.isneginf(got[~mask]))
        assert any(fields[f][idx].max() > 0 for f in FIELDS) and not np.array_equal(got, base)


def test_the_name_field_finds_a_tool_by_the_words_of_its_name(bfcl_lexical):
    index = bfcl_lexical
    keys = [c.key for c in index.catalog.cards]
    scores = index.field_bm25_scores("solve quadratic", ["name", "parameters"])
    top = [keys[i].partition("~")[0] for i in top_k(scores["name"], 3)]
    assert top[0] == "solve_quadratic"
    # the name field scores exactly the cards whose name has one of the words
    words = {"solv", "quadrat"}
    matched = {i for i, c in enumerate(index.catalog.cards)
               if words & set(bm25_tokens(search_fields(c)["name"], index._stem))}
    assert set(np.flatnonzero(scores["name"] > 0)) == matched and len(matched) > 3
    # built on first use, one field at a time
    fresh = ToolIndex(index.catalog, None, index.tool_vecs, index.group_vecs, index.schema_tokens)
    assert fresh.field_seconds == {}
    np.testing.assert_array_equal(fresh.field_bm25_scores("solve quadratic", ["name"])["name"], scores["name"])
    assert set(fresh.field_seconds) == {"bm25:name"}
    with pytest.raises(ValueError, match="unknown card field 'title'"):
        index.field_bm25("title")


def test_dense_field_vectors_are_cached_and_an_empty_field_gets_no_credit(metatool, encoder):
    bench, index, queries = metatool
    vecs, has = index.field_vecs("name")
    assert has.all() and vecs.shape == index.tool_vecs.shape
    names = [search_fields(c)["name"] for c in bench.catalog.cards]
    np.testing.assert_allclose(vecs, encoder.encode(names), atol=1e-5)
    assert any(p.name.startswith("field_vecs_name_") for p in index.index_dir.iterdir())

    class NoEncoding:  # a cache hit must not embed anything
        name = encoder.name

        def encode(self, *a, **k):
            raise AssertionError("embedded again despite the cache")

    again = ToolIndex.build(bench.catalog, index.index_dir.parent, encoder=NoEncoding())
    np.testing.assert_array_equal(again.field_vecs("name")[0], vecs)
    # MetaTool's tools have no parameters: that field embeds nothing and ranks nothing.
    pvecs, phas = index.field_vecs("parameters")
    assert not phas.any() and not pvecs.any()
    everything = np.ones(len(index.catalog), bool)
    plain = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"))
    params = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"),
                        RetrievalConfig(w_dense_fields=FieldWeights(parameters=1.0)))
    named = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"),
                       RetrievalConfig(w_dense_fields=FieldWeights(name=1.0)))
    changed = 0
    for text in queries[:10]:
        texts = plain.intents(text)
        Q = encoder.encode(texts)
        assert np.array_equal(params.fuse(texts, Q, everything)[0], plain.fuse(texts, Q, everything)[0])
        changed += not np.array_equal(named.fuse(texts, Q, everything)[0], plain.fuse(texts, Q, everything)[0])
    assert changed == 10


def test_field_weights_in_the_config_and_their_errors(tmp_path):
    cfg = load_tools_config(None, ["retrieval.w_bm25_fields.name=0.5", "retrieval.w_dense_fields.parameters=0.25"])
    assert cfg.retrieval.w_bm25_fields.weighted() == [("name", 0.5)]
    assert cfg.retrieval.w_dense_fields.weighted() == [("parameters", 0.25)]
    # per-field rankings alone are a retrieval signal
    assert load_tools_config(None, ["retrieval.w_bm25=0", "retrieval.w_dense=0", "retrieval.w_bm25_fields.name=1"])
    bad = {"retrieval.w_bm25_fields.name=-1": ("retrieval.w_bm25_fields.name", "greater than or equal to 0"),
           "retrieval.w_dense_fields.description=.nan": ("retrieval.w_dense_fields.description", "finite"),
           "retrieval.w_bm25_fields.title=1": ("retrieval.w_bm25_fields.title", "Extra inputs"),
           "retrieval.w_bm25_fields.parameters=high": ("retrieval.w_bm25_fields.parameters", "valid number"),
           "retrieval.w_dense_fields=0.5": ("retrieval.w_dense_fields", "FieldWeights")}
    for override, (field, msg) in bad.items():
        with pytest.raises(DataError, match=msg) as e:
            load_tools_config(None, [override])
        assert e.value.field == field, override
    with pytest.raises(DataError, match="every per-field weight are 0"):
        load_tools_config(None, ["retrieval.w_bm25=0", "retrieval.w_dense=0"])
    p = tmp_path / "t.yaml"
    p.write_text("retrieval:\n  top_k: 5\n  w_bm25_fields:\n    name: 0.5\n    description: -0.25\n")
    with pytest.raises(DataError) as e:
        load_tools_config(p)
    assert e.value.field == "retrieval.w_bm25_fields.description" and e.value.line == 5


@pytest.mark.slow
def test_no_unauthorised_exposure_with_every_field_ranking_on(metatool, index_for_tiny_catalog):
    """The filter decides before any ranking: the tiny catalog's adversarial queries, and the
    security check on MetaTool (a fifth of it locked behind a permission), with all per-field weights on."""
    from evaluation.tools.evaluate import security_check
    from tests.catalogs import ADVERSARIAL, POLICY, SUPPORT

    tiny = index_for_tiny_catalog
    r = ToolRouter(tiny, POLICY, RetrievalConfig(top_k=3, **ALL_FIELDS), pinned=["payments.refund_payment"])
    allowed = set(np.array([c.key for c in tiny.catalog.cards])[r.visible(SUPPORT).visible])
    for q in ADVERSARIAL:
        for k in (1, 3, 8):
            d = r.route(q, SUPPORT, top_k_override=k)
            for g in ("payments", "invoices", "ops", "weather", "nope"):
                r.expand(d, g, SUPPORT)
            assert set(d.tool_keys) <= allowed, q
    bench, index, _ = metatool
    sec = security_check(bench, index, ToolsConfig(retrieval=RetrievalConfig(**ALL_FIELDS)), n_targets=30)
    assert sec["adversarial_queries"] == 60 and sec["unauthorised_exposures"] == 0


@pytest.fixture(scope="module")
def index_for_tiny_catalog(encoder, tmp_path_factory):
    return build_tiny_index(encoder, tmp_path_factory)


def test_the_field_search_reports_each_step_and_never_loses(shared_data, tmp_path):
    """On MetaTool's training queries (base encoder): each stage's score is the fusion's own score
    at its weights, no stage is worse than the one before, and the weights come from the grid."""
    from evaluation.tools.fusion import FIELD_W, _score, field_search, parse_fields, training_sets

    cfg = ToolsConfig()
    fitted, used, build = training_sets(cfg, shared_data, tmp_path, per_bench=40, fields=("bm25",),
                                        benches=("metatool",))
    assert used == {"metatool": 40} and {"bm25:name", "bm25:description"} <= set(build["metatool"])
    res = field_search(cfg, fitted, (1.0, 60.0), ("bm25",), log=lambda *_: None)
    first, last = res["steps"]
    assert first["score"] == pytest.approx(_score(ToolRouter(fitted[0][1], fitted[0][2], cfg.retrieval), fitted[0][3],
                                                  fitted[0][4], False))
    assert last["score"] >= first["score"] and last["gain"] == pytest.approx(last["score"] - first["score"])
    assert last["per_benchmark"] == {"metatool": last["score"]}
    assert set(res["w_bm25_fields"].values()) <= set(FIELD_W) and res["w_dense_fields"] == dict.fromkeys(FIELDS, 0.0)
    at_best = cfg.retrieval.model_copy(update={"w_bm25": res["w_bm25"], "rrf_k": res["rrf_k"],
                                               "w_bm25_fields": FieldWeights(**res["w_bm25_fields"])})
    name, index, policy, prepared, keys = fitted[0]
    assert _score(ToolRouter(index, policy, at_best), prepared, keys, False) == pytest.approx(res["score"])
    assert max(p["score"] for p in res["points"]) == pytest.approx(res["score"])
    assert parse_fields("bm25, dense") == ("bm25", "dense") and parse_fields("") == ()
    with pytest.raises(ValueError, match="unknown signal"):
        parse_fields("bm25,sparse")
