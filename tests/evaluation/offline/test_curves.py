"""The λ-curve comparison at a fixed cost (evaluation.offline.curves), on tiny inputs.

    .venv/bin/python -m pytest -q tests/evaluation/offline/test_curves.py
"""

from __future__ import annotations

import numpy as np

from evaluation.offline.curves import best_within, bootstrap_curves, curve_outcomes, read_at_cost
from evaluation.offline.routing_eval import LAMBDA_GRID, RoutingData


def _cheap_and_dear(n: int = 40) -> tuple[np.ndarray, RoutingData]:
    """Model 0 cheap and right on half the rows, model 1 dear and always right; the probabilities know which half."""
    correct = np.c_[np.arange(n) % 2 == 0, np.ones(n, bool)]
    probs = np.c_[np.where(correct[:, 0], 0.9, 0.1), np.full(n, 0.95)]
    return probs, RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), ["cheap", "dear"], correct,
                              np.tile([0.001, 0.01], (n, 1)), np.arange(n) % 4)


def test_best_within_reads_the_most_accurate_point_no_dearer_than_the_budget():
    acc = np.array([[0.70, 0.70], [0.80, 0.85], [0.90, 0.95]])  # grid points × resamples
    usd = np.array([[1.0, 1.0], [2.0, 2.5], [3.0, 2.4]])
    assert best_within(acc, usd, np.array([2.2, 2.45])).tolist() == [0.80, 0.95]  # not the dearer 0.85
    assert best_within(acc, usd, np.array([0.5, 0.5])).tolist() == [0.70, 0.70]  # none within: the cheapest's


def test_curve_outcomes_sweep_lambda_from_the_cheap_model_to_the_good_one():
    # Model 0 is cheap and right on half the rows, model 1 dear and always right; the probabilities know which
    # half: a small λ sends everything to model 0, a middling one only the rows model 0 gets wrong to model 1,
    # a large one everything to model 1.
    probs, data = _cheap_and_dear()
    n = len(probs)
    ok, paid = curve_outcomes(probs, data)
    assert ok.shape == paid.shape == (len(LAMBDA_GRID), n)
    acc, usd = ok.mean(axis=1), paid.mean(axis=1)
    assert acc[0] == 0.5 and usd[0] == 0.001 and acc[-1] == 1.0 and usd[-1] == 0.01
    middle = (acc == 1.0) & (usd < 0.006)
    assert middle.any()  # the ranking pays: full accuracy for about half the dear model's cost


def test_a_curve_read_against_its_own_copy_differs_by_nothing():
    probs, data = _cheap_and_dear()
    n = len(probs)
    idx = np.random.default_rng(0).integers(0, n, size=(50, n))
    curves = bootstrap_curves({"a": probs, "b": probs.copy()}, data, idx)
    v, ref, lo, hi = read_at_cost(curves, "b", np.full(n, 0.006), idx)["a"]
    assert v == ref == 1.0 and lo == hi == 0.0  # at 60% of the dear model's cost: full accuracy
