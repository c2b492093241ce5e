"""Twin category priors from exchangeable halves (evaluation.prior_twins; the rates fitted on a subset of rows,
`category_prior_probs(..., fit=)`), on tiny inputs.

    .venv/bin/python -m pytest -q tests/evaluation/test_prior_twins.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evaluation.category_prior import category_prior_probs
from evaluation.prior_twins import summarise, twin_rows, twin_subsets
from evaluation.routing_eval import RoutingData


def _data(n: int = 80, noisy: bool = False) -> RoutingData:
    # Two categories: the cheap model is right on every "a" request and wrong on every "b"; the dear one is always
    # right. With noisy=True the cheap model's "a" rows are right only where a seeded coin says so.
    cats = np.array(["a", "b"] * (n // 2))
    cheap = cats == "a"
    if noisy:
        cheap &= np.random.default_rng(1).random(n) < 0.8
    correct = np.c_[cheap, np.ones(n, bool)]
    return RoutingData([f"x:{i}" for i in range(n)], cats, ["cheap", "dear"], correct,
                       np.tile([0.001, 0.01], (n, 1)), np.arange(n) % 4)


def test_the_prior_fitted_on_every_row_is_the_category_prior():
    d = _data(noisy=True)
    assert np.array_equal(category_prior_probs(d.categories, d.correct, d.folds, fit=np.ones(len(d.folds), bool)),
                          category_prior_probs(d.categories, d.correct, d.folds))


def test_the_prior_fitted_on_a_half_reads_only_its_half():
    d = _data(noisy=True)
    half = np.arange(len(d.folds)) < 40
    got = category_prior_probs(d.categories, d.correct, d.folds, fit=half)
    row = 50  # fold 2, category "a"
    train = (d.folds != d.folds[row]) & half & (d.categories == "a")
    assert np.allclose(got[row], d.correct[train].mean(axis=0))
    flipped = d.correct.copy()
    flipped[~half] = ~flipped[~half]  # labels outside the half change; the twin must not move
    assert np.allclose(category_prior_probs(d.categories, flipped, d.folds, fit=half), got)


def test_an_empty_half_is_refused_by_fold():
    d = _data()
    with pytest.raises(ValueError, match="fold 0: no training row"):
        category_prior_probs(d.categories, d.correct, d.folds, fit=d.folds == 0)


def test_twins_that_learn_the_same_rates_route_alike_and_reach_each_other():
    # A deterministic pool: both halves learn exactly the same rates, so the twins route identically and every
    # draw reaches.
    rows = twin_rows(_data(), splits=3, resamples=200)
    assert len(rows) == 3 * 2 * 2  # splits × targets × directions
    assert all(r["identical"] and r["reached"] and r["Δ $/M"] == 0 for r in rows)
    table = summarise(pd.DataFrame(rows).assign(run="toy"))
    assert table["reached"].tolist() == [1.0, 1.0] and table["every target of the run"].tolist() == [1.0, 1.0]


def test_twin_subsets_are_complementary_halves_or_independent_shares():
    a, b = twin_subsets(10_000, seed=3)
    assert not (a & b).any() and (a | b).all() and abs(a.mean() - 0.5) < 0.02
    a, b = twin_subsets(10_000, seed=3, share=0.9)
    assert abs(a.mean() - 0.9) < 0.01 and abs(b.mean() - 0.9) < 0.01 and abs((a & b).mean() - 0.81) < 0.02
    assert not np.array_equal(a, b)
    with pytest.raises(ValueError, match="share must be in"):
        twin_subsets(10, seed=0, share=1.0)
