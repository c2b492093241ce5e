"""The λ-curve comparison at a fixed cost (evaluation.prior_curves), on tiny inputs.

    .venv/bin/python -m pytest -q tests/evaluation/test_prior_curves.py
"""

from __future__ import annotations

import numpy as np

from evaluation.prior_curves import best_within, curve_outcomes
from evaluation.routing_eval import LAMBDA_GRID, RoutingData


def test_best_within_reads_the_most_accurate_point_no_dearer_than_the_budget():
    acc = np.array([[0.70, 0.70], [0.80, 0.85], [0.90, 0.95]])  # grid points × resamples
    usd = np.array([[1.0, 1.0], [2.0, 2.5], [3.0, 2.4]])
    assert best_within(acc, usd, np.array([2.2, 2.45])).tolist() == [0.80, 0.95]  # not the dearer 0.85
    assert best_within(acc, usd, np.array([0.5, 0.5])).tolist() == [0.70, 0.70]  # none within: the cheapest's


def test_curve_outcomes_sweep_lambda_from_the_cheap_model_to_the_good_one():
    # Model 0 is cheap and right on half the rows, model 1 dear and always right; the probabilities know which
    # half: a small λ sends everything to model 0, a middling one only the rows model 0 gets wrong to model 1,
    # a large one everything to model 1.
    n = 40
    correct = np.c_[np.arange(n) % 2 == 0, np.ones(n, bool)]
    probs = np.c_[np.where(correct[:, 0], 0.9, 0.1), np.full(n, 0.95)]
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), ["cheap", "dear"], correct,
                       np.tile([0.001, 0.01], (n, 1)), np.arange(n) % 4)
    ok, paid = curve_outcomes(probs, data)
    assert ok.shape == paid.shape == (len(LAMBDA_GRID), n)
    acc, usd = ok.mean(axis=1), paid.mean(axis=1)
    assert acc[0] == 0.5 and usd[0] == 0.001 and acc[-1] == 1.0 and usd[-1] == 0.01
    middle = (acc == 1.0) & (usd < 0.006)
    assert middle.any()  # the ranking pays: full accuracy for about half the dear model's cost
