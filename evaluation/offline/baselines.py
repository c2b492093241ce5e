"""Baseline routers, each producing held-out P(correct) on the same folds as the router.

    from evaluation.offline.baselines import BASELINES
    probs = BASELINES.get("tfidf_lr")().oof_probabilities(texts=texts, correct=correct, folds=folds)

A baseline is a tiny class with one method to implement, `fit_predict`
(train rows in, test-row probabilities out); `oof_probabilities` runs it
fold by fold so that every probability is from a model that never saw
that query.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import NearestNeighbors

from data.registry import Registry
from data.schema import Example


class Baseline(ABC):
    needs: str = "texts"  # which input it reads: "texts" or "embeddings"

    @abstractmethod
    def fit_predict(self, train_x, train_y: np.ndarray, test_x) -> np.ndarray:
        """Probabilities (test rows × models) from training rows and their labels (bool)."""

    def oof_probabilities(self, *, correct: np.ndarray, folds: np.ndarray, texts: Sequence[str] | None = None,
                          embeddings: np.ndarray | None = None) -> np.ndarray:
        x = texts if self.needs == "texts" else embeddings
        if x is None:
            raise ValueError(f"{type(self).__name__} needs {self.needs}")
        out = np.zeros(correct.shape, dtype=float)
        for k in sorted(set(folds.tolist())):
            test = folds == k
            train_idx, test_idx = np.flatnonzero(~test), np.flatnonzero(test)
            tx = [x[i] for i in train_idx] if self.needs == "texts" else x[train_idx]
            vx = [x[i] for i in test_idx] if self.needs == "texts" else x[test_idx]
            out[test] = self.fit_predict(tx, correct[train_idx], vx)
        return out


BASELINES: Registry[type[Baseline]] = Registry("baseline")


@BASELINES.register("tfidf_lr")
class TfidfLogisticRouter(Baseline):
    """TF-IDF of the request text + one logistic regression per model."""

    def __init__(self, c: float = 1.0, max_features: int = 50_000) -> None:
        self.c, self.max_features = c, max_features

    def fit_predict(self, train_x, train_y, test_x):
        vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=self.max_features, sublinear_tf=True)
        xtr = vec.fit_transform(train_x)
        xte = vec.transform(test_x)
        out = np.zeros((xte.shape[0], train_y.shape[1]))
        for j in range(train_y.shape[1]):
            y = train_y[:, j]
            if y.all() or not y.any():  # one class only: its rate is the best estimate
                out[:, j] = float(y.mean())
                continue
            clf = LogisticRegression(C=self.c, max_iter=1000)
            clf.fit(xtr, y)
            out[:, j] = clf.predict_proba(xte)[:, 1]
        return out


@BASELINES.register("knn")
class KnnRouter(Baseline):
    """Mean correctness of the k nearest training queries (cosine, encoder embeddings)."""

    needs = "embeddings"

    def __init__(self, k: int = 10) -> None:
        self.k = k

    def fit_predict(self, train_x, train_y, test_x):
        nn = NearestNeighbors(n_neighbors=min(self.k, len(train_x)), metric="cosine").fit(train_x)
        _, idx = nn.kneighbors(test_x)
        return train_y[idx].mean(axis=1)


def request_text(example: Example) -> str:
    """What a text baseline reads: the conversation and the offered tools' names and descriptions."""
    turns = " ".join(m.content or "" for m in example.messages if m.role in ("user", "assistant"))
    tools = " ".join(f"{t.name} {t.description}" for t in example.tools)
    return f"{turns} || {tools}"
