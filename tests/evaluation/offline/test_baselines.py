import numpy as np

from evaluation.offline.baselines import BASELINES


def _toy():
    # model 0 is right on "math" queries, model 1 on "weather" queries
    texts = [f"compute the sum of {i} and {i + 1} math" for i in range(20)] + [f"weather in city {i} today forecast" for i in range(20)]
    correct = np.zeros((40, 2), dtype=bool)
    correct[:20, 0] = True
    correct[20:, 1] = True
    folds = np.arange(40) % 4
    return texts, correct, folds


def test_tfidf_lr_learns_which_model_fits_which_text():
    texts, correct, folds = _toy()
    p = BASELINES.get("tfidf_lr")().oof_probabilities(texts=texts, correct=correct, folds=folds)
    assert p.shape == (40, 2)
    assert (p[:20, 0] > p[:20, 1]).all() and (p[20:, 1] > p[20:, 0]).all()


def test_knn_uses_neighbours_from_other_folds_only():
    texts, correct, folds = _toy()
    emb = np.zeros((40, 2))
    emb[:20, 0] = 1.0
    emb[20:, 1] = 1.0
    emb += np.random.default_rng(0).normal(0, 0.01, emb.shape)
    p = BASELINES.get("knn")(k=5).oof_probabilities(embeddings=emb, correct=correct, folds=folds)
    assert np.allclose(p[:20], [1.0, 0.0]) and np.allclose(p[20:], [0.0, 1.0])
    # a constant-label column is predicted at its rate, not crashing logistic regression
    c2 = correct.copy()
    c2[:, 1] = True
    p2 = BASELINES.get("tfidf_lr")().oof_probabilities(texts=texts, correct=c2, folds=folds)
    assert np.allclose(p2[:, 1], 1.0)
