"""The category prior: what knowing BFCL's category would give a router (a reference, not servable).

    from evaluation.offline.category_prior import category_prior_probs
    probs = category_prior_probs(categories, correct, folds)   # n × models, held-out

Each held-out row gets, per model, its category's success rate on the other
folds; a category the other folds never saw gets the model's overall rate there.
The category is not visible at serving time, so this row only says how much
the request's kind is worth. On BFCL v1 (default pool, the router's 5 folds):
macro AUC 0.692; λ rule 0.913 at $1,311/M for best-single accuracy, 0.878 at
$136/M at ≤ 10% of its cost (docs/router.md).
"""

from __future__ import annotations

import numpy as np


def category_prior_probs(categories: np.ndarray, correct: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """P(correct) per row and model from the other folds; with one fold, in-sample (as evaluate_router does)."""
    categories, correct, folds = np.asarray(categories), np.asarray(correct, dtype=float), np.asarray(folds)
    if not (len(categories) == len(correct) == len(folds)):
        raise ValueError(f"categories ({len(categories)}), correct ({len(correct)}) and folds ({len(folds)}) differ "
                         "in length")
    out = np.zeros(correct.shape)
    ks = sorted(set(folds.tolist()))
    for k in ks:
        test = folds == k
        train = ~test if len(ks) > 1 else test
        overall = correct[train].mean(axis=0)
        for cat in set(categories[test].tolist()):
            rows = train & (categories == cat)
            out[test & (categories == cat)] = correct[rows].mean(axis=0) if rows.any() else overall
    return out
