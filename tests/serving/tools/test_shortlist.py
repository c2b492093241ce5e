"""Shortlist fusion (`retrieval.shortlist`): each signal credits only its top N candidates."""

import numpy as np

from serving.tools.index import rrf_fuse, top_k


def _signals(n=400, seed=0):
    rng = np.random.default_rng(seed)
    bm25 = np.where(rng.random(n) < 0.3, rng.random(n) * 10, 0.0).astype(np.float32)
    dense = rng.standard_normal(n).astype(np.float32)
    visible = rng.random(n) < 0.8
    return bm25, dense, visible


def test_a_shortlist_as_long_as_the_candidates_is_the_exact_fusion():
    bm25, dense, visible = _signals()
    full = rrf_fuse(bm25, dense, visible, 10, 0.5, 1.0)
    assert np.array_equal(rrf_fuse(bm25, dense, visible, 10, 0.5, 1.0, shortlist=int(visible.sum())), full)


def test_cards_in_both_shortlists_score_as_in_the_exact_fusion():
    bm25, dense, visible = _signals()
    full = rrf_fuse(bm25, dense, visible, 10, 0.5, 1.0)
    short = rrf_fuse(bm25, dense, visible, 10, 0.5, 1.0, shortlist=30)
    idx = np.flatnonzero(visible)
    top_b = set(idx[np.argsort(-np.where(bm25[idx] > 0, bm25[idx], -np.inf), kind="stable")[:30]])
    top_d = set(idx[np.argsort(-dense[idx], kind="stable")[:30]])
    both = sorted(i for i in top_b & top_d if bm25[i] > 0)
    assert both and np.allclose(short[both], full[both])
    outside = [i for i in idx if i not in top_b and i not in top_d]
    assert np.all(short[outside] == 0.0)  # candidates still, with no credit
    assert np.all(np.isneginf(short[~visible]))  # hidden cards stay out
    # the best cards are those of the exact fusion here (both signals' heads agree with it)
    assert set(top_k(short, 5)) <= top_b | top_d


def test_a_card_bm25_does_not_match_gets_no_bm25_credit_in_the_shortlist():
    bm25 = np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32)
    dense = np.array([0.1, 0.2, 0.3, 0.0], dtype=np.float32)
    out = rrf_fuse(bm25, dense, np.ones(4, bool), 10, 1.0, 1.0, shortlist=3)
    assert out[3] == 1 / 11  # BM25's only match; outside dense's top 3
    assert np.allclose(out[:3], [1 / 13, 1 / 12, 1 / 11])  # dense credit only
