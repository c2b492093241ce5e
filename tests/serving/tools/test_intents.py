"""Multi-intent retrieval: the splitter on crafted requests, and the router exposing every ask's tool."""

import numpy as np
import pytest

from serving.tools.config import GroupConfig, RetrievalConfig
from serving.tools.intents import split_intents
from serving.tools.router import ToolRouter
from tests.catalogs import POLICY, SUPPORT


@pytest.mark.parametrize("text, parts", [
    ("Find a vegan restaurant in Los Angeles.", ["Find a vegan restaurant in Los Angeles."]),
    ("Find the area of a rectangle with length 7 and breadth 3. Also, calculate the area of a circle with radius 5.",
     ["Find the area of a rectangle with length 7 and breadth 3.", "Also, calculate the area of a circle with radius 5."]),
    ("How many steps do I need to walk to lose 500 calories and how much water do I need today?",
     ["How many steps do I need to walk to lose 500 calories", "how much water do I need today?"]),
    ("Book the Hilton for 2 rooms; then get the time difference between New York and LA",
     ["Book the Hilton for 2 rooms", "then get the time difference between New York and LA"]),
    # "and" inside one ask (not followed by a new ask) and decimals do not split
    ("Convert 3.5 kg of apples and pears into pounds", ["Convert 3.5 kg of apples and pears into pounds"]),
    # a fragment too short to be an ask joins its neighbour
    ("Hi. Please list the invoices of customer 7.", ["Hi. Please list the invoices of customer 7."]),
    ("first line about invoices for ACME\nsecond line asks for the weather in Paris",
     ["first line about invoices for ACME", "second line asks for the weather in Paris"]),
    ("   ", []),
])
def test_split_intents(text, parts):
    assert split_intents(text) == parts


def test_split_intents_caps_the_number_of_parts_and_keeps_every_word():
    text = " ".join(f"Calculate the value number {i} for me now." for i in range(10))
    parts = split_intents(text, max_parts=4)
    assert len(parts) == 4
    assert " ".join(parts).split() == text.split()
    assert split_intents(text, max_parts=1) == [text]


def _router(index, **retrieval):  # noqa: F811
    return ToolRouter(index, POLICY, RetrievalConfig(top_k=1, k_per_intent=1, **retrieval),
                      GroupConfig(confidence_threshold=0.0, min_confidence=0.0))


ASKS = "List the invoices of customer 7 for last month. Also, what is the weather forecast for Paris tomorrow?"


def test_every_ask_gets_its_tool(index):  # noqa: F811
    d = _router(index).route(ASKS, SUPPORT)
    assert d.intents == ["List the invoices of customer 7 for last month.", "Also, what is the weather forecast for Paris tomorrow?"]
    assert {"invoices.list_invoices", "weather.forecast"} <= set(d.tool_keys)
    assert len(d.tool_keys) == 2  # k grows to k_per_intent × asks
    assert {g["name"] for g in d.groups} >= {"invoices", "weather"}

    one = _router(index, max_intents=1).route(ASKS, SUPPORT)  # the whole request as one query
    assert one.intents == [] and len(one.tool_keys) == 1


def test_given_vectors_give_the_same_decision(index):  # noqa: F811
    r = _router(index)
    texts = r.intents(ASKS)
    vecs = index.query_encoder.encode(texts)
    a = r.route(ASKS, SUPPORT)
    b = _router(index).route(ASKS, SUPPORT, qvecs=vecs)
    c = _router(index).route(ASKS, SUPPORT, qvecs=vecs[0])  # the whole request's row only: asks embedded
    assert a.tool_keys == b.tool_keys == c.tool_keys
    assert [g["name"] for g in a.groups] == [g["name"] for g in b.groups]
    np.testing.assert_allclose(a.confidence, b.confidence, atol=1e-6)


class _Spy:
    """The index's query encoder, recording what each call embedded and with which cap."""

    def __init__(self, enc):
        self.enc, self.calls = enc, []

    def encode(self, texts, batch_size=32, max_length=None):
        self.calls.append((list(texts), max_length))
        return self.enc.encode(texts, batch_size=batch_size, max_length=max_length)


def test_token_budget_and_mean_of_asks(index, monkeypatch):  # noqa: F811
    spy = _Spy(index.query_encoder)
    monkeypatch.setattr(index, "query_encoder", spy)
    r = _router(index, query_token_budget=32, whole_vector="mean_of_asks", overlap_bm25=False)
    texts = r.intents(ASKS)
    Q = r._vectors(texts, None)
    assert spy.calls == [(texts[1:], 16)]  # the asks only, the budget shared between them
    m = Q[1:].mean(axis=0)
    np.testing.assert_allclose(Q[0], m / np.linalg.norm(m), atol=1e-6)
    base = getattr(index.encoder, "base", index.encoder)  # the numpy encoder, or the one under ORT
    long = "list the invoices of this customer " * 10
    capped = base.token_ids(long, 16)
    assert len(capped) == 16 and capped[-1] == base.token_ids(long)[-1] and capped[:15] == base.token_ids(long)[:15]

    spy.calls.clear()
    one = _router(index, max_intents=1, query_token_budget=64, overlap_bm25=False)
    one.route(ASKS, SUPPORT)
    assert spy.calls == [([ASKS], 64)]


def test_overlapping_bm25_with_the_embedding_changes_nothing(index):  # noqa: F811
    for q in (ASKS, "refund my payment", "what's the status of payment pay_123?"):
        a = _router(index, overlap_bm25=True).route(q, SUPPORT)
        b = _router(index, overlap_bm25=False).route(q, SUPPORT)
        assert a.tool_keys == b.tool_keys and a.groups == b.groups and a.confidence == b.confidence


def test_concurrent_routes_match_sequential_ones(index):  # noqa: F811
    """The gateway routes on worker threads: decisions must not depend on who else is routing."""
    from concurrent.futures import ThreadPoolExecutor

    queries = [ASKS, "refund my payment", "what's the status of payment pay_123?", "weather in Paris",
               "list invoices. Then check the payment status of pay_9"] * 3
    r = _router(index)
    alone = [_router(index).route(q, SUPPORT).tool_keys for q in queries]
    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(lambda q: r.route(q, SUPPORT).tool_keys, queries))
    assert together == alone


def test_the_evaluation_embeds_what_routing_embeds(index, tmp_path):  # noqa: F811
    """tools eval batches and caches the embeddings; they must be the rows `route` would compute."""
    from evaluation.tools.data import Benchmark, Query
    from evaluation.tools.evaluate import intent_vectors

    queries = [Query("q:0", ASKS, ["invoices.list_invoices", "weather.forecast"]),
               Query("q:1", "refund my payment", ["payments.refund_payment"]),
               Query("q:2", "what's the status of payment pay_123? Then list the invoices of customer 9", [])]
    bench = Benchmark("tiny", index.catalog, queries)
    for kw in ({}, {"query_token_budget": 32}, {"whole_vector": "mean_of_asks", "query_token_budget": 24}):
        r = _router(index, **kw)
        got = intent_vectors(bench, r, tmp_path / str(len(kw)))
        for q, v in zip(queries, got):
            np.testing.assert_allclose(v, r._vectors(r.intents(q.text), None), atol=1e-5)


class _PackSpy(_Spy):
    def encode_packed(self, texts, max_length=None, pack_tokens=None):
        self.calls.append((list(texts), max_length, pack_tokens))
        return self.enc.encode_packed(texts, max_length=max_length, pack_tokens=pack_tokens)


def test_a_requests_texts_go_through_the_encoder_packed(index, monkeypatch):  # noqa: F811
    spy = _PackSpy(index.query_encoder)
    monkeypatch.setattr(index, "query_encoder", spy)
    r = _router(index, overlap_bm25=False, pack_tokens=128)
    texts = r.intents(ASKS)
    Q = r._vectors(texts, None)
    assert spy.calls == [(texts, None, 128)]  # the whole request and both asks: one call
    np.testing.assert_allclose(Q, spy.enc.encode(texts, batch_size=1), atol=3e-5)
    spy.calls.clear()
    _router(index, overlap_bm25=False, pack_tokens=0)._vectors(texts, None)
    assert spy.calls == [(texts, None)]  # 0: one pass per text (the plain encode path)
