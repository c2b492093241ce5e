"""Grouped folds and the calibration metrics.

    .venv/bin/python -m pytest tests/training/test_folds_calibration.py -q
"""

from __future__ import annotations

import numpy as np
import pytest

from data.schema import Example, Expected, Message
from training.calibration import ece, fit_temperature, reliability_curve, roc_auc, sigmoid
from training.folds import group_key, grouped_folds, grouped_split


def test_same_question_is_one_group_whatever_the_case_or_spacing():
    mk = lambda q, i: Example(id=f"s:{i}", source="s", category="c", messages=[Message(role="user", content=q)],
                              expected=Expected.nothing())
    assert group_key(mk("Find  the Weather ", 0)) == group_key(mk("find the weather", 1))
    assert group_key(mk("find the weather", 0)) != group_key(mk("find the time", 1))


def test_grouped_folds_never_split_a_group_and_are_balanced_and_deterministic():
    groups = [f"g{i // 3}" for i in range(90)] + [f"h{i}" for i in range(30)]  # groups of 3 and of 1
    fold = grouped_folds(groups, k=5, seed=1)
    for g in set(groups):
        assert len({fold[i] for i, x in enumerate(groups) if x == g}) == 1
    assert sorted(np.bincount(fold, minlength=5)) == [24] * 5
    assert (fold == grouped_folds(groups, k=5, seed=1)).all()
    assert not (fold == grouped_folds(groups, k=5, seed=2)).all()
    with pytest.raises(ValueError, match="lower folds"):
        grouped_folds(["a", "a", "b"], k=3)


def test_grouped_split_keeps_groups_apart():
    groups = [f"g{i // 2}" for i in range(40)]
    tr, va = grouped_split(groups, np.arange(40), 0.25, seed=0)
    assert len(va) == 10 and len(tr) == 30
    assert not {groups[i] for i in tr} & {groups[i] for i in va}


def test_auc_matches_sklearn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    p = np.round(rng.random(200) * 0.5 + 0.3 * y, 1)  # rounded: many ties
    assert roc_auc(y, p) == pytest.approx(roc_auc_score(y, p))
    assert roc_auc([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1]) == 1.0
    assert np.isnan(roc_auc([1, 1], [0.2, 0.3]))


def test_ece_and_reliability_on_known_values():
    y = np.array([1, 0, 1, 1])
    p = np.array([0.9, 0.9, 0.15, 0.15])
    # bin 9: predicted 0.9, observed 0.5; bin 1: predicted 0.15, observed 1.0
    assert ece(y, p) == pytest.approx(0.5 * 0.4 + 0.5 * 0.85)
    assert [(c["bin"], c["count"]) for c in reliability_curve(y, p)] == [(1, 2), (9, 2)]
    assert ece([1, 0], [1.0, 0.0]) == 0.0


def test_temperature_recovers_overconfidence():
    rng = np.random.default_rng(0)
    true_logits = rng.normal(0, 1.5, 20000)
    y = rng.random(20000) < sigmoid(true_logits)
    t = fit_temperature(true_logits * 3.0, y)  # a model 3x too confident
    assert t == pytest.approx(3.0, rel=0.05)
    assert ece(y, sigmoid(true_logits * 3.0 / t)) < ece(y, sigmoid(true_logits * 3.0)) / 3
    assert fit_temperature(np.array([1.0, 2.0]), np.array([1, 1])) == 1.0  # one class: leave alone
