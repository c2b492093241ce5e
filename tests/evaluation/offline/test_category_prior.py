"""The category prior reference: other folds' per-category rates, the overall rate for unseen categories.

    .venv/bin/python -m pytest tests/evaluation/offline/test_category_prior.py -q
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.offline.category_prior import category_prior_probs


def test_each_row_gets_its_category_rate_from_the_other_folds():
    cats = np.array(["a", "a", "b", "a", "b", "b"])
    folds = np.array([0, 1, 0, 1, 1, 0])
    correct = np.array([[1, 0], [0, 1], [1, 1], [1, 1], [0, 0], [1, 0]], dtype=bool)
    p = category_prior_probs(cats, correct, folds)
    # fold 0 rows learn from fold 1: category a = rows 1, 3 -> [0.5, 1.0]; category b = row 4 -> [0, 0]
    assert p[0] == pytest.approx([0.5, 1.0]) and p[2] == pytest.approx([0.0, 0.0]) and p[5] == pytest.approx([0.0, 0.0])
    # fold 1 rows learn from fold 0: a = row 0 -> [1, 0]; b = rows 2, 5 -> [1, 0.5]
    assert p[1] == pytest.approx([1.0, 0.0]) and p[3] == pytest.approx([1.0, 0.0]) and p[4] == pytest.approx([1.0, 0.5])


def test_a_category_missing_from_the_other_folds_gets_the_overall_rate():
    cats = np.array(["a", "a", "a", "new"])
    folds = np.array([0, 0, 1, 1])
    correct = np.array([[1], [0], [1], [1]], dtype=bool)
    p = category_prior_probs(cats, correct, folds)
    assert p[3, 0] == pytest.approx(0.5)  # "new" is not in fold 0: fold 0's overall rate (1 of 2)
    assert p[2, 0] == pytest.approx(0.5) and p[0, 0] == pytest.approx(1.0)


def test_shapes_are_checked_and_one_fold_is_in_sample():
    with pytest.raises(ValueError, match="differ in length"):
        category_prior_probs(np.array(["a"]), np.array([[1], [0]]), np.array([0, 0]))
    p = category_prior_probs(np.array(["a", "a", "b"]), np.array([[1], [0], [1]]), np.array([0, 0, 0]))
    assert p[:, 0] == pytest.approx([0.5, 0.5, 1.0])  # like evaluate_router with one fold: the rows themselves
