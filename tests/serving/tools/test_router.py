"""The router end to end on a tiny card catalog with the real MiniLM encoder.

Security is asserted as exact zeros: whatever the query says, a caller never
has a tool it may not see exposed, pinned, or added through request_group.
"""

import numpy as np
import pytest

from serving.tools.cards import ToolCard
from serving.tools.catalog import REQUEST_GROUP, Catalog
from serving.tools.config import GroupConfig, RetrievalConfig
from serving.tools.index import ToolIndex, rrf_fuse, top_k
from serving.tools.policy import Caller
from serving.tools.router import ToolRouter
from tests.catalogs import ADMIN, ADVERSARIAL, POLICY, SUPPORT

def router(index, **kw):
    return ToolRouter(index, POLICY, kw.pop("retrieval", RetrievalConfig(top_k=3)), kw.pop("groups", GroupConfig()), **kw)


def test_routes_to_the_relevant_tool_with_request_group_last(index):
    d = router(index).route("what's the status of payment pay_123?", SUPPORT)
    assert d.tool_keys[0] == "payments.get_payment_status"
    assert d.exposed_names[-1] == REQUEST_GROUP
    assert d.groups[0]["name"] == "payments" and d.confidence > 0.5
    assert d.catalog_version == index.catalog.version
    assert set(d.timings_ms) >= {"filter", "embed", "score", "select", "total"}
    assert 0 < d.schema_tokens["exposed"] <= d.schema_tokens["visible_catalog"] + 200


def test_filter_reasons_are_reported(index):
    d = router(index).route("refund my payment", SUPPORT)
    hidden = {h["tool"]: h["reason"] for h in d.hidden}
    assert hidden == {"payments.refund_payment": "permission", "payments.charge_card": "permission",
                      "invoices.issue_invoice": "permission", "ops.restart_service": "environment",
                      "ops.service_status": "health"}


def test_embeddings_are_cached_per_catalog_version(index, encoder):
    assert (index.index_dir / "tool_vecs.npy").exists() and index.index_dir.name == index.catalog.version
    class NoEncoding:  # a cache hit must not embed anything
        def encode(self, *a, **k):
            raise AssertionError("embedded again despite the cache")

    again = ToolIndex.build(index.catalog, index.index_dir.parent, encoder=NoEncoding())
    np.testing.assert_array_equal(again.tool_vecs, index.tool_vecs)
    assert index.tool_vecs.shape == (len(index.catalog), 384)
    np.testing.assert_allclose(np.linalg.norm(index.tool_vecs, axis=1), 1.0, atol=1e-5)


def test_unauthorised_tools_are_never_exposed(index):
    """Exactly zero exposures of tools SUPPORT may not see: routed, pinned, expanded, at any K."""
    r = router(index, pinned=["payments.refund_payment", "invoices.list_invoices"])
    may_see = {index.catalog.cards[i].exposed_name for i in np.flatnonzero(r.visible(SUPPORT).visible)}
    forbidden = {c.exposed_name for c in index.catalog.cards} - may_see
    assert forbidden == {"payments.refund_payment", "payments.charge_card", "invoices.issue_invoice",
                         "ops.restart_service", "ops.service_status"}
    exposures = 0
    for q in ADVERSARIAL:
        for k in (1, 3, 8, 50):
            d = r.route(q, SUPPORT, top_k_override=k)
            for g in r.group_names:
                r.expand(d, g, SUPPORT)
            exposures += len(forbidden & set(d.exposed_names))
            assert "invoices.list_invoices" in d.tool_keys  # the visible pinned tool is there
    assert exposures == 0
    # And a caller allowed to see them does get them when asked.
    d = r.route(ADVERSARIAL[0], ADMIN)
    assert "payments.refund_payment" in d.tool_keys


def test_request_group_offers_and_expands_only_visible_groups(index):
    r = router(index)
    d = r.route("weather in Paris tomorrow", Caller(tenant="other", roles=["support"]))
    desc = d.tools[-1]["function"]["description"]
    assert "weather" not in desc  # tenant 'other' may not see the weather group: not even named
    exp = r.expand(d, "weather", Caller(tenant="other", roles=["support"]))
    assert (exp.accepted, exp.added, exp.reason) == (False, [], "unknown_group")
    exp2 = r.expand(d, "invoices", Caller(tenant="other", roles=["support"]))
    assert exp2.accepted and "invoices.list_invoices" in d.tool_keys + exp2.added
    assert [e.group for e in d.expansions] == ["weather", "invoices"]


def test_model_output_outside_the_exposed_set_is_rejected(index):
    r = router(index, retrieval=RetrievalConfig(top_k=1))
    d = r.route("what's the status of payment pay_123?", ADMIN)
    assert d.tool_keys == ["payments.get_payment_status"]
    assert r.check_call(d, "payments.get_payment_status").valid
    for name in ("get_payment_status", "payments.get_payment_statuss", "payments.refund_payment", "nope"):
        check = r.check_call(d, name)
        assert (check.valid, check.error_type) == (False, "tool_error:not_exposed")


def test_low_confidence_widens_and_then_falls_back_to_read_only(index):
    # A threshold no softmax reaches forces widening; min_confidence = 1 forces the safe default.
    widen = router(index, groups=GroupConfig(max_groups=1, confidence_threshold=1.0, min_confidence=0.0))
    d = widen.route("charge the card and issue an invoice", ADMIN)
    # one group → two, K 3 → 6: every tool of payments and invoices (5) fits
    assert d.mode == "widened" and [g["name"] for g in d.groups] == ["payments", "invoices"]
    assert sorted(d.tool_keys) == ["invoices.issue_invoice", "invoices.list_invoices", "payments.charge_card",
                                   "payments.get_payment_status", "payments.refund_payment"]
    safe = router(index, groups=GroupConfig(max_groups=1, confidence_threshold=1.0, min_confidence=1.0))
    d = safe.route("charge the card and issue an invoice", ADMIN)
    assert d.mode == "safe_default"
    risks = {index.catalog.cards[index.catalog.position[k]].risk for k in d.tool_keys}
    assert risks == {"read"}


def test_rrf_fuse_and_top_k():
    bm25 = np.array([0.0, 2.0, 1.0, 5.0])
    dense = np.array([0.9, 0.1, 0.8, 0.2])
    mask = np.array([True, True, True, False])
    fused = rrf_fuse(bm25, dense, mask, k=1.0)
    # ranks among candidates: bm25 1→1, 2→2, 0 gets no credit; dense 0→1, 2→2, 1→3
    np.testing.assert_allclose(fused[:3], [1 / 2, 1 / 2 + 1 / 4, 1 / 3 + 1 / 3])
    assert fused[3] == -np.inf
    assert top_k(fused, 2).tolist() == [1, 2] and top_k(fused, 10).tolist() == [1, 2, 0]


def test_pinned_must_exist(index):
    with pytest.raises(ValueError, match="pinned tools not in the catalog"):
        router(index, pinned=["payments.nope"])


def test_duplicate_card_key_in_one_catalog():
    from data.errors import DataError

    with pytest.raises(DataError, match="duplicate tool name"):
        Catalog([ToolCard(name="a", namespace="x"), ToolCard(name="a", namespace="x")])


def test_request_group_tokens_add_up_exactly(index):
    """The per-group token sums equal counting the whole request_group JSON with the real tokenizer."""
    import json
    import random

    from serving.tools.cards import GroupCard
    from serving.tools.catalog import request_group_tool

    r = router(index)
    rng = random.Random(0)
    names = list(r.group_names)
    # Unusual descriptions too: punctuation, quotes, backslashes, non-ASCII (escaped in JSON).
    odd = GroupCard(name="weather", description='use for "forecasts", rain\\snow; café — 東京 too')
    for n in range(len(names) + 1):
        ids = np.array(sorted(rng.sample(range(len(names)), n)), dtype=np.int64)
        groups = [odd if names[g] == "weather" else r.catalog.groups[names[g]] for g in ids]
        r._rg_tokens.clear()
        expected = index.encoder.count_tokens(json.dumps(request_group_tool(groups)))
        assert r._request_group_tokens(ids, groups) == expected, [g.name for g in groups]
