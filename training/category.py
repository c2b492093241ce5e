"""The category branch: which kind of request this is, read from its shape, and what that kind says about each model.

    cat = CategoryModel.fit(x_lex, meta, categories, y, mask)     # training rows only
    z = cat.logits(x_lex, meta)           # [n, n_models]: logit of Σ_c P(c | request) · rate(c, model)
    branch = cat.torch_branch()           # the same, in-graph, from the lexical branch's TF-IDF and the metadata

Why: knowing a request's BFCL category (simple, multiple, parallel, java,
relevance, …) and each model's success rate in it was a better router than the
router (the report's "category prior" row). Nobody knows the category at
serving time, but the request shows most of it: how many functions are offered
and how many calls the ask implies, the schema's language and value types, how
well the functions fit the ask. This branch learns P(category | request) from
exactly those — the lexical branch's TF-IDF of the packed request (tool
signatures with their types, the ask) and the scaled metadata features — with
one multinomial logistic regression fitted on the training rows' categories,
and mixes the training rows' per-category success rates with it. The category
is a training target only; serving computes the branch from the request.

rate(c, model) is smoothed toward the model's overall training rate with
`prior_rows` pseudo-rows, so a rare category does not give 0 or 1. The
router's logit becomes (1 − weight)·(head ⊕ lexical blend) + weight·this.
Weights live in `category.safetensors`; settings in router.json["category"].
The weight and the classifier's C are `category.weight` and `category.c` of configs/train.yaml.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import sparse
from torch import nn

CATEGORY_FILE = "category.safetensors"
EPS = 1e-4


@dataclass
class CategoryModel:
    categories: list[str]
    coef_lex: np.ndarray  # [n_lex_features, n_categories]
    coef_meta: np.ndarray  # [n_meta, n_categories]
    intercept: np.ndarray  # [n_categories]
    rates: np.ndarray  # [n_categories, n_models]: P(correct | category) on the training rows, smoothed
    weight: float = 0.5  # its share of the router's logit

    @property
    def n_models(self) -> int:
        return self.rates.shape[1]

    @classmethod
    def fit(cls, x_lex: sparse.spmatrix, meta: np.ndarray, categories: Sequence[str], y: np.ndarray, mask: np.ndarray,
            *, c: float = 1.0, prior_rows: float = 5.0, weight: float = 0.5) -> CategoryModel:
        """The category classifier and the per-category rates from training rows (labels `y` where `mask`)."""
        from sklearn.linear_model import LogisticRegression

        cats = np.asarray([str(x) for x in categories])
        if not (x_lex.shape[0] == len(meta) == len(cats) == len(y)):
            raise ValueError(f"category branch: {x_lex.shape[0]} TF-IDF rows, {len(meta)} metadata rows, "
                             f"{len(cats)} categories and {len(y)} label rows differ")
        names = sorted(set(cats.tolist()))
        n_lex, n_meta = x_lex.shape[1], meta.shape[1]
        coef = np.zeros((n_lex + n_meta, len(names)))
        intercept = np.zeros(len(names))
        if len(names) > 1:
            x = sparse.hstack([x_lex, sparse.csr_matrix(np.asarray(meta, dtype=np.float64))]).tocsr()
            clf = LogisticRegression(C=c, max_iter=2000).fit(x, cats)  # multinomial (lbfgs) over the categories
            order = [list(clf.classes_).index(name) for name in names]
            w = clf.coef_ if len(names) > 2 else np.vstack([-clf.coef_[0] / 2, clf.coef_[0] / 2])
            b = clf.intercept_ if len(names) > 2 else np.array([-clf.intercept_[0] / 2, clf.intercept_[0] / 2])
            coef, intercept = w[order].T, b[order]
        yy, mm = np.asarray(y, dtype=float), np.asarray(mask, dtype=bool)
        overall = (yy * mm).sum(axis=0) / np.maximum(mm.sum(axis=0), 1)
        rates = np.zeros((len(names), y.shape[1]))
        for i, name in enumerate(names):
            r = cats == name
            rates[i] = ((yy[r] * mm[r]).sum(axis=0) + prior_rows * overall) / (mm[r].sum(axis=0) + prior_rows)
        coef = np.ascontiguousarray(coef)
        return cls(names, coef[:n_lex], coef[n_lex:], intercept, np.clip(rates, EPS, 1 - EPS), weight)

    def category_probs(self, x_lex: sparse.spmatrix, meta: np.ndarray) -> np.ndarray:
        """P(category | request), [n, n_categories]."""
        z = np.asarray(x_lex @ self.coef_lex) + np.asarray(meta, dtype=np.float64) @ self.coef_meta + self.intercept
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def logits(self, x_lex: sparse.spmatrix, meta: np.ndarray) -> np.ndarray:
        return logit(self.category_probs(x_lex, meta) @ self.rates)

    # --- saving ------------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        return {"weight": self.weight, "categories": self.categories, "n_models": self.n_models,
                "rates": self.rates.tolist()}

    def save(self, folder: str | Path) -> Path:
        from safetensors.numpy import save_file

        path = Path(folder) / CATEGORY_FILE
        # safetensors writes an array's buffer as it lies: a transposed view must be made contiguous first.
        arrays = {"coef_lex": self.coef_lex, "coef_meta": self.coef_meta, "intercept": self.intercept, "rates": self.rates}
        save_file({k: np.ascontiguousarray(v, dtype=np.float64) for k, v in arrays.items()}, str(path))
        return path

    @classmethod
    def load(cls, folder: str | Path, settings: dict[str, Any]) -> CategoryModel:
        from safetensors.numpy import load_file

        t = load_file(str(Path(folder) / CATEGORY_FILE))
        return cls(list(settings["categories"]), t["coef_lex"], t["coef_meta"], t["intercept"], t["rates"],
                   float(settings["weight"]))

    def torch_branch(self) -> CategoryBranch:
        return CategoryBranch(self)


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 − p)), p clipped to [EPS, 1 − EPS]: the branch's probabilities as logits."""
    p = np.clip(p, EPS, 1 - EPS)
    return np.log(p / (1 - p))


def blend(base: np.ndarray, category: np.ndarray, weight: float) -> np.ndarray:
    """The router's logit: (1 − weight)·(head ⊕ lexical blend) + weight·(the category branch)."""
    return (1.0 - weight) * base + weight * category


class CategoryBranch(nn.Module):
    """`CategoryModel.logits` in torch from the lexical TF-IDF rows and the scaled metadata: exports to ONNX."""

    def __init__(self, cat: CategoryModel) -> None:
        super().__init__()
        self.weight = float(cat.weight)
        self.register_buffer("coef_lex", torch.from_numpy(cat.coef_lex.astype(np.float32)))
        self.register_buffer("coef_meta", torch.from_numpy(cat.coef_meta.astype(np.float32)))
        self.register_buffer("intercept", torch.from_numpy(cat.intercept.astype(np.float32)))
        self.register_buffer("rates", torch.from_numpy(cat.rates.astype(np.float32)))

    def forward(self, x_lex: torch.Tensor, metadata: torch.Tensor) -> torch.Tensor:
        z = x_lex @ self.coef_lex + metadata.to(x_lex.dtype) @ self.coef_meta + self.intercept
        p = torch.softmax(z, dim=1) @ self.rates
        p = p.clamp(EPS, 1 - EPS)
        return torch.log(p / (1 - p))
