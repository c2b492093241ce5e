"""The lexical branch: TF-IDF of the packed request's word pieces + one logistic regression per pool model.

    lex = LexicalModel.fit(table.ids, table.y, table.mask, special_ids=tokenizer.all_special_ids,
                           vocab_size=tokenizer.vocab_size)
    z = lex.logits(table.ids)                     # [n, n_models]
    branch = lex.torch_branch()                   # the same logits from (input_ids, attention_mask), in-graph

Why: on BFCL v1 a bag of words predicts which model fails about as well as the
encoder does, and differently (held-out numbers in docs/router.md); averaging
the two logits beats either. It reads the same packed ids the encoder reads, so
it needs nothing new at serving: `torch_branch` computes it inside the exported
ONNX graph (ONNX Runtime and Triton alike) from `input_ids` and `attention_mask`.

Features: every non-special word piece (its id) and every pair of consecutive
non-special word pieces, hashed into `buckets` slots; kept when in at least
`min_df` training requests (the `max_features` most frequent by document
count); sublinear TF (1 + ln count) × smoothed IDF, L2-normalised — sklearn's
TfidfVectorizer(sublinear_tf=True) over these keys. Weights live in
`lexical.safetensors` next to the heads; settings in router.json["lexical"].
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import sparse
from torch import nn

LEXICAL_FILE = "lexical.safetensors"
BIGRAM_PRIME = 1_000_003  # pair (a, b) → (a·P + b) mod buckets; int64-safe for any vocabulary < 9e12


@dataclass
class LexicalModel:
    vocab_size: int
    buckets: int
    special_ids: list[int]
    columns: np.ndarray  # int64 [vocab_size + buckets]: key → feature column, -1 if not kept
    idf: np.ndarray  # [n_features]
    coef: np.ndarray  # [n_features, n_models]
    intercept: np.ndarray  # [n_models]
    weight: float = 0.5  # its share of the blended logit: (1 - weight)·head + weight·lexical

    @property
    def n_features(self) -> int:
        return len(self.idf)

    @property
    def n_models(self) -> int:
        return self.coef.shape[1]

    # --- features ----------------------------------------------------------------------------------
    @staticmethod
    def keys(ids: Sequence[int], special: set[int], vocab_size: int, buckets: int) -> list[int]:
        """Unigram keys (the id) and hashed bigram keys (vocab_size + slot) of one packed request."""
        ids = [int(i) for i in ids]
        keep = [i not in special for i in ids]
        out = [i for i, k in zip(ids, keep) if k]
        out += [vocab_size + (a * BIGRAM_PRIME + b) % buckets
                for a, b, ka, kb in zip(ids, ids[1:], keep, keep[1:]) if ka and kb]
        return out

    @classmethod
    def _counts(cls, rows: Sequence[Sequence[int]], special: set[int], vocab_size: int, buckets: int):
        """CSR of key counts, [n, vocab_size + buckets]."""
        indptr, indices, data = [0], [], []
        for ids in rows:
            c = Counter(cls.keys(ids, special, vocab_size, buckets))
            indices.extend(c.keys())
            data.extend(c.values())
            indptr.append(len(indices))
        return sparse.csr_matrix((np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64), indptr),
                                 shape=(len(rows), vocab_size + buckets))

    def features(self, rows: Sequence[Sequence[int]]) -> sparse.csr_matrix:
        """TF-IDF rows, [n, n_features]."""
        counts = self._counts(rows, set(self.special_ids), self.vocab_size, self.buckets).tocoo()
        col = self.columns[counts.col]
        keep = col >= 0
        x = sparse.csr_matrix((counts.data[keep], (counts.row[keep], col[keep])), shape=(counts.shape[0], self.n_features))
        x.data = 1.0 + np.log(x.data)
        x = x.multiply(self.idf[None, :]).tocsr()
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1))).ravel()
        return sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ x

    # --- fit / predict -----------------------------------------------------------------------------
    @classmethod
    def fit(cls, rows: Sequence[Sequence[int]], y: np.ndarray, mask: np.ndarray, *, special_ids: Sequence[int],
            vocab_size: int, buckets: int = 1 << 20, min_df: int = 2, max_features: int | None = 50_000,
            c: float = 1.0, weight: float = 0.5) -> LexicalModel:
        """Vocabulary, IDF and the per-model regressions from training rows (labels `y` where `mask`)."""
        from sklearn.linear_model import LogisticRegression

        if len(rows) != len(y):
            raise ValueError(f"{len(rows)} requests but {len(y)} label rows")
        counts = cls._counts(rows, set(int(i) for i in special_ids), vocab_size, buckets)
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        kept = np.flatnonzero(df >= min_df)
        if max_features is not None and len(kept) > max_features:
            kept = kept[np.argsort(-df[kept], kind="stable")[:max_features]]
            kept.sort()
        if len(kept) == 0:
            raise ValueError(f"no word piece is in {min_df} or more training requests; lower lexical.min_df")
        columns = np.full(vocab_size + buckets, -1, dtype=np.int64)
        columns[kept] = np.arange(len(kept))
        n = len(rows)
        idf = np.log((1.0 + n) / (1.0 + df[kept])) + 1.0
        model = cls(vocab_size, buckets, sorted(int(i) for i in special_ids), columns, idf,
                    np.zeros((len(kept), y.shape[1])), np.zeros(y.shape[1]), weight)
        x = model.features(rows)
        for j in range(y.shape[1]):
            r = np.flatnonzero(mask[:, j])
            t = y[r, j] > 0.5
            if len(r) == 0:
                continue
            if t.all() or not t.any():  # one class: its (clipped) rate, no slope
                rate = np.clip(t.mean(), 1e-3, 1 - 1e-3)
                model.intercept[j] = np.log(rate / (1 - rate))
                continue
            # newton-cg: the same optimum as lbfgs (≤ 0.003 apart in probability on BFCL v1), ~9x faster here.
            clf = LogisticRegression(C=c, solver="newton-cg", max_iter=1000).fit(x[r], t)
            model.coef[:, j], model.intercept[j] = clf.coef_[0], clf.intercept_[0]
        return model

    def logits(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        return np.asarray(self.features(rows) @ self.coef) + self.intercept

    # --- saving ------------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        return {"weight": self.weight, "vocab_size": self.vocab_size, "buckets": self.buckets,
                "special_ids": self.special_ids, "n_features": self.n_features, "n_models": self.n_models}

    def save(self, folder: str | Path) -> Path:
        from safetensors.numpy import save_file

        kept = np.flatnonzero(self.columns >= 0)
        path = Path(folder) / LEXICAL_FILE
        # Only the kept keys are stored (the column table is rebuilt on load): ~50k entries instead of ~1M.
        save_file({"keys": kept.astype(np.int64), "idf": self.idf.astype(np.float64),
                   "coef": self.coef.astype(np.float64), "intercept": self.intercept.astype(np.float64)}, str(path))
        return path

    @classmethod
    def load(cls, folder: str | Path, settings: dict[str, Any]) -> LexicalModel:
        from safetensors.numpy import load_file

        t = load_file(str(Path(folder) / LEXICAL_FILE))
        columns = np.full(settings["vocab_size"] + settings["buckets"], -1, dtype=np.int64)
        columns[t["keys"]] = np.arange(len(t["keys"]))
        return cls(int(settings["vocab_size"]), int(settings["buckets"]), [int(i) for i in settings["special_ids"]],
                   columns, t["idf"], t["coef"], t["intercept"], float(settings["weight"]))

    def blend(self, head_logits: np.ndarray, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """Head logits with the first n_models columns blended (models added later keep their head's logit)."""
        out = np.array(head_logits, dtype=np.float64)
        k = self.n_models
        out[:, :k] = (1.0 - self.weight) * out[:, :k] + self.weight * self.logits(rows)
        return out

    def torch_branch(self) -> LexicalBranch:
        return LexicalBranch(self)


class LexicalBranch(nn.Module):
    """`LexicalModel.logits` in torch from (input_ids, attention_mask): exports to ONNX (ScatterElements add)."""

    def __init__(self, lex: LexicalModel) -> None:
        super().__init__()
        self.vocab_size, self.buckets, self.n_features = lex.vocab_size, lex.buckets, lex.n_features
        self.special_ids = list(lex.special_ids)
        self.weight = float(lex.weight)
        self.register_buffer("columns", torch.from_numpy(lex.columns.astype(np.int32)))  # int32: half the size
        self.register_buffer("idf", torch.from_numpy(lex.idf.astype(np.float32)))
        self.register_buffer("coef", torch.from_numpy(lex.coef.astype(np.float32)))
        self.register_buffer("intercept", torch.from_numpy(lex.intercept.astype(np.float32)))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.features(input_ids, attention_mask) @ self.coef + self.intercept

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The TF-IDF rows, [batch, n_features] (`LexicalModel.features`; the category branch reads them too)."""
        keep = attention_mask > 0
        for s in self.special_ids:
            keep = keep & (input_ids != s)
        pairs = self.vocab_size + torch.remainder(input_ids[:, :-1] * BIGRAM_PRIME + input_ids[:, 1:], self.buckets)
        keys = torch.cat([input_ids, pairs], dim=1)
        kept = torch.cat([keep, keep[:, :-1] & keep[:, 1:]], dim=1)
        cols = self.columns.index_select(0, keys.reshape(-1)).reshape(keys.shape).long()
        # Keys not kept (padding, specials, unseen) all go to one spare column, dropped after counting.
        cols = torch.where(kept & (cols >= 0), cols, torch.full_like(cols, self.n_features))
        counts = torch.zeros(input_ids.shape[0], self.n_features + 1, dtype=torch.float32, device=input_ids.device)
        counts = counts.scatter_add(1, cols, torch.ones_like(cols, dtype=torch.float32))[:, : self.n_features]
        tf = torch.where(counts > 0, 1.0 + torch.log(counts.clamp(min=1.0)), torch.zeros_like(counts)) * self.idf
        return tf / tf.norm(dim=1, keepdim=True).clamp(min=1e-12)
