"""The lexical branch: its keys, sklearn-equal TF-IDF, the per-model regressions, torch == numpy, save/load.

    .venv/bin/python -m pytest tests/training/test_lexical.py -q
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.calibration import roc_auc
from training.lexical import BIGRAM_PRIME, LexicalModel

SPECIAL = [0, 1, 2]  # pad, cls, sep in these tests
V, B = 50, 64


def test_keys_are_non_special_pieces_and_hashed_consecutive_pairs():
    keys = LexicalModel.keys([1, 7, 9, 2, 9, 0], set(SPECIAL), V, B)
    # unigrams 7, 9, 9; pairs only where both sides are non-special: (7, 9) — not (9, 2), (2, 9) or (9, 0)
    assert keys == [7, 9, 9, V + (7 * BIGRAM_PRIME + 9) % B]


def rows_and_labels(n=40, seed=0):
    """Requests of 3..12 pieces from ids 3..29; model 0 is right iff piece 5 is there, model 1 always."""
    rng = np.random.default_rng(seed)
    rows = [[1, *rng.integers(3, 30, rng.integers(3, 13)).tolist(), 2] for _ in range(n)]
    y = np.array([[float(5 in r), 1.0] for r in rows], dtype=np.float32)
    return rows, y, np.ones_like(y, dtype=bool)


def test_tfidf_equals_sklearn_on_the_same_keys():
    from sklearn.feature_extraction.text import TfidfVectorizer

    rows, y, mask = rows_and_labels()
    lex = LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B, min_df=2, max_features=None)
    vec = TfidfVectorizer(analyzer=lambda r: [str(k) for k in LexicalModel.keys(r, set(SPECIAL), V, B)],
                          min_df=2, sublinear_tf=True)
    ref = vec.fit_transform(rows).toarray()
    # same features, ours in key order: reorder sklearn's columns by their key
    order = np.argsort([int(k) for k in vec.get_feature_names_out()])
    assert lex.n_features == ref.shape[1]
    assert np.allclose(lex.features(rows).toarray(), ref[:, order], atol=1e-12)


def test_min_df_and_max_features_keep_the_most_common_keys():
    rows = [[3, 4], [3, 4], [3, 5], [3, 6]]
    y, mask = np.ones((4, 1), dtype=np.float32), np.ones((4, 1), dtype=bool)
    lex = LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B, min_df=2)
    kept = set(np.flatnonzero(lex.columns >= 0).tolist())
    assert kept == {3, 4, V + (3 * BIGRAM_PRIME + 4) % B}  # 5, 6 and their pairs are in one request only
    top = LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B, min_df=1, max_features=1)
    assert set(np.flatnonzero(top.columns >= 0).tolist()) == {3}  # in all four requests
    with pytest.raises(ValueError, match="lower lexical.min_df"):
        LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B, min_df=5)


def test_it_learns_a_word_and_a_one_class_model_gets_its_rate():
    rows, y, mask = rows_and_labels(80)
    lex = LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B, c=10.0)
    test, yt, _ = rows_and_labels(40, seed=1)
    z = lex.logits(test)
    assert roc_auc(yt[:, 0], z[:, 0]) > 0.95
    assert np.allclose(lex.coef[:, 1], 0) and lex.intercept[1] == pytest.approx(np.log(0.999 / 0.001))


def test_unlabelled_rows_are_left_out_of_a_models_regression():
    rows, y, mask = rows_and_labels(80)
    mask[:40, 0] = False
    flipped = y.copy()
    flipped[:40, 0] = 1.0 - flipped[:40, 0]  # what a masked label says must not matter
    a = LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B)
    b = LexicalModel.fit(rows, flipped, mask, special_ids=SPECIAL, vocab_size=V, buckets=B)
    assert np.array_equal(a.coef, b.coef) and np.array_equal(a.intercept, b.intercept)
    assert np.abs(a.coef[:, 0]).max() > 0


def padded(rows):
    width = max(map(len, rows)) + 3  # extra padding must not count
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    att = torch.zeros_like(ids)
    for k, r in enumerate(rows):
        ids[k, : len(r)] = torch.tensor(r)
        att[k, : len(r)] = 1
    return ids, att


def test_torch_branch_equals_numpy_and_blend_leaves_added_models_alone():
    rows, y, mask = rows_and_labels(60)
    lex = LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B, weight=0.25)
    test = [*rows_and_labels(10, seed=2)[0], [1, 2], [1, 29, 2]]  # an empty request and an unseen piece
    with torch.no_grad():
        z = lex.torch_branch()(*padded(test)).numpy()
    assert np.abs(z - lex.logits(test)).max() < 1e-5
    assert np.allclose(z[-2], lex.intercept)  # nothing kept: the intercepts
    head = np.arange(len(test) * 3, dtype=float).reshape(len(test), 3)  # 2 pool models + one added later
    blended = lex.blend(head, test)
    assert np.allclose(blended[:, :2], 0.75 * head[:, :2] + 0.25 * lex.logits(test))
    assert np.array_equal(blended[:, 2], head[:, 2])


def test_save_and_load_round_trip(tmp_path):
    rows, y, mask = rows_and_labels()
    lex = LexicalModel.fit(rows, y, mask, special_ids=SPECIAL, vocab_size=V, buckets=B, weight=0.4)
    lex.save(tmp_path)
    back = LexicalModel.load(tmp_path, lex.settings())
    assert back.weight == 0.4 and back.special_ids == SPECIAL and np.array_equal(back.columns, lex.columns)
    assert np.array_equal(back.logits(rows), lex.logits(rows))
