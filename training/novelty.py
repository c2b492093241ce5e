"""How unlike the router's training requests a request is, on what the router reads: its packed word pieces and
its metadata (training/metadata.py, standardised as the router standardises it).

    novelty = Novelty.fit(table.ids, meta, folds, safe_model="qwen3-32b")     # training (training/recipe.py save)
    novelty.save(router_dir); novelty = Novelty.load(router_dir, info["novelty"])
    novelty.parts(ids, meta)    # {"text": …, "metadata": …, "score": …}
    novelty.flags(ids, meta)    # score > threshold: the router has seen nothing like it

A router trained on benchmark questions has no basis for a request that looks like nothing it was trained on
(an agent harness's 6,000-character system prompt and 30 tools): its probabilities there are extrapolation.
The gateway sends such a request to the pool's safe model — the most accurate single model on the training
labels — and says so in the decision (serving/client.py). Once `switchcraft learn` has trained on logged traffic
of that kind, the new router's own training rows include it and the score falls.

Two distances, each to the nearest training requests: the text's (1 − the cosine of the nearest row, TF-IDF over
word-piece unigrams and bigrams, hashed to 2^18 dimensions so nothing of the vocabulary is stored, sublinear term
frequency, rows L2-normalised) and the metadata's (Euclidean distance to the K-th nearest row: a 6,000-character
system prompt and 30 tools sit far outside benchmark questions). Each is divided by its own held-out `quantile`
and the score is the larger of the two. Everything is fitted held out: each fold's rows are scored against the
other folds' rows, and the threshold is the `quantile` (0.98) of those held-out scores, so it flags 2% of
held-out benchmark requests by construction (the share is in router.json).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.preprocessing import normalize

FILE = "novelty.npz"
N_FEATURES = 2**18
QUANTILE = 0.98  # the held-out share of benchmark requests that may be flagged: 2%
MAX_ROWS = 50_000  # the most training rows kept (a seeded sample beyond): bounds the file and the search
K = 5  # the metadata distance is to the K-th nearest training row: one odd twin does not make a request familiar


def _vectorizer() -> HashingVectorizer:
    return HashingVectorizer(n_features=N_FEATURES, analyzer="word", token_pattern=r"\S+", ngram_range=(1, 2),
                             alternate_sign=False, norm=None, lowercase=False)


def _counts(ids: list[list[int]]) -> sp.csr_matrix:
    return _vectorizer().transform([" ".join(map(str, row)) for row in ids]).tocsr()


def _idf(counts: sp.csr_matrix) -> np.ndarray:
    df = np.bincount(counts.indices, minlength=N_FEATURES)
    return (np.log((1 + counts.shape[0]) / (1 + df)) + 1.0).astype(np.float32)


def _weigh(counts: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    x = counts.astype(np.float32).tocsr()
    x.data = (1.0 + np.log(x.data)) * idf[x.indices]  # sublinear tf: a piece seen 40 times is not 40× the evidence
    return normalize(x, norm="l2", copy=False)


def _nearest(queries: sp.csr_matrix, rows_t: sp.csr_matrix) -> np.ndarray:
    """1 − the largest cosine of each query with any row; `rows_t` is the rows transposed (features × rows), both
    L2-normalised."""
    if rows_t.shape[1] == 0:
        return np.ones(queries.shape[0], dtype=np.float32)
    sims = (queries @ rows_t).tocsr()
    best = np.zeros(queries.shape[0], dtype=np.float32)
    if sims.nnz:
        best = np.asarray(sims.max(axis=1).todense(), dtype=np.float32).ravel()
    return np.clip(1.0 - best, 0.0, 1.0).astype(np.float32)


def _kth(queries: np.ndarray, rows: np.ndarray, k: int = K) -> np.ndarray:
    """Euclidean distance of each query to its k-th nearest row."""
    if len(rows) == 0:
        return np.full(len(queries), np.inf, dtype=np.float32)
    d2 = (queries**2).sum(1)[:, None] - 2 * queries @ rows.T + (rows**2).sum(1)[None, :]
    k = min(k, len(rows))
    return np.sqrt(np.maximum(np.partition(d2, k - 1, axis=1)[:, k - 1], 0)).astype(np.float32)


@dataclass
class Novelty:
    idf: np.ndarray  # (N_FEATURES,)
    rows: sp.csr_matrix  # the training requests' text, weighted and normalised
    meta: np.ndarray  # (n, n_features) the training requests' standardised metadata
    text_scale: float  # each distance's held-out quantile: the score is the larger of the two, each over its own
    meta_scale: float
    threshold: float
    safe_model: str
    held_out_flagged: float  # the share of held-out rows over the threshold when it was fitted

    def __post_init__(self) -> None:
        self.rows_t = self.rows.T.tocsr()  # features × rows: a query's product touches only its own features

    @classmethod
    def fit(cls, ids: list[list[int]], meta: np.ndarray, folds: np.ndarray, *, safe_model: str,
            quantile: float = QUANTILE, seed: int = 0) -> Novelty:
        """`meta`: each row's standardised metadata; `folds`: each row's held-out fold (grouped, as the router's):
        the scales and the threshold are read off scores of rows against the other folds only. ValueError with
        fewer than two folds."""
        folds, meta = np.asarray(folds), np.asarray(meta, dtype=np.float32)
        if not len(ids) == len(meta) == len(folds):
            raise ValueError(f"{len(ids)} rows of ids, {len(meta)} of metadata, {len(folds)} fold numbers")
        if len(set(folds.tolist())) < 2:
            raise ValueError("novelty needs at least two folds to fit its threshold held out")
        counts = _counts(ids)
        text, dist = np.zeros(len(ids), dtype=np.float32), np.zeros(len(ids), dtype=np.float32)
        for f in sorted(set(folds.tolist())):
            train, test = folds != f, folds == f
            idf = _idf(counts[train])
            text[test] = _nearest(_weigh(counts[test], idf), _weigh(counts[train], idf).T.tocsr())
            dist[test] = _kth(meta[test], meta[train])
        text_scale = max(float(np.quantile(text, quantile)), 1e-6)
        meta_scale = max(float(np.quantile(dist, quantile)), 1e-6)
        held = np.maximum(text / text_scale, dist / meta_scale)
        threshold = float(np.quantile(held, quantile, method="higher"))  # flags at most 1 − quantile
        keep = np.arange(len(ids))
        if len(keep) > MAX_ROWS:
            keep = np.sort(np.random.default_rng(seed).choice(keep, MAX_ROWS, replace=False))
        idf = _idf(counts)
        return cls(idf, _weigh(counts[keep], idf), meta[keep], text_scale, meta_scale, threshold, safe_model,
                   float((held > threshold).mean()))

    def parts(self, ids: list[int], meta: np.ndarray) -> dict[str, float]:
        text = float(_nearest(_weigh(_counts([ids]), self.idf), self.rows_t)[0])
        dist = float(_kth(np.asarray(meta, dtype=np.float32)[None, :], self.meta)[0])
        return {"text": text, "metadata": dist, "score": max(text / self.text_scale, dist / self.meta_scale)}

    def score(self, ids: list[int], meta: np.ndarray) -> float:
        return self.parts(ids, meta)["score"]

    def flags(self, ids: list[int], meta: np.ndarray) -> bool:
        return self.score(ids, meta) > self.threshold

    # --- on disk: novelty.npz beside router.json, its settings in router.json's "novelty" ---------------------
    def info(self) -> dict[str, Any]:
        return {"file": FILE, "threshold": self.threshold, "text_scale": self.text_scale,
                "metadata_scale": self.meta_scale, "safe_model": self.safe_model,
                "held_out_flagged": self.held_out_flagged, "rows": int(self.rows.shape[0]),
                "basis": "the larger of two distances to the nearest training requests, each over its held-out "
                         f"{QUANTILE:.0%} quantile: 1 − cosine (TF-IDF of packed word-piece uni- and bigrams) and the "
                         f"metadata's Euclidean distance to the {K}th nearest; threshold: the {QUANTILE:.0%} quantile "
                         "of held-out scores (each fold against the others)"}

    def save(self, router_dir: str | Path) -> Path:
        path = Path(router_dir) / FILE
        r = self.rows
        np.savez_compressed(path, idf=self.idf, data=r.data, indices=r.indices, indptr=r.indptr,
                            shape=np.asarray(r.shape), meta=self.meta)
        return path

    @classmethod
    def load(cls, router_dir: str | Path, info: dict[str, Any]) -> Novelty:
        path = Path(router_dir) / info.get("file", FILE)
        if not path.exists():
            raise FileNotFoundError(f"{path}: router.json names a novelty index that is not there; copy it beside "
                                    "router.json or export the router again")
        z = np.load(path)
        rows = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        return cls(z["idf"], rows, z["meta"], float(info["text_scale"]), float(info["metadata_scale"]),
                   float(info["threshold"]), str(info["safe_model"]), float(info.get("held_out_flagged", 0.0)))
