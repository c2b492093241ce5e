"""Synthetic cascade data for the strategy tests: three models (two cheap, one strong) with chosen agreement."""

from __future__ import annotations

import numpy as np

from evaluation.offline.routing_eval import RoutingData
from training.policy.simulate import CascadeData

MODELS = ["cheap_a", "cheap_b", "strong"]
COSTS = np.array([1.0, 2.0, 10.0])


def cascade_data(correct, agree_ab, agree_ta=None, agree_tb=None, latency=None, folds=None):
    correct = np.asarray(correct, bool)
    n = len(correct)
    agree = np.zeros((n, 3, 3), bool)
    agree[:, range(3), range(3)] = True
    agree[:, 0, 1] = agree[:, 1, 0] = agree_ab
    if agree_ta is not None:
        agree[:, 2, 0] = agree[:, 0, 2] = agree_ta
    if agree_tb is not None:
        agree[:, 2, 1] = agree[:, 1, 2] = agree_tb
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), MODELS, correct,
                       np.tile(COSTS, (n, 1)), np.zeros(n, int) if folds is None else np.asarray(folds))
    lat = np.tile([1.0, 2.0, 5.0], (n, 1)) if latency is None else np.asarray(latency, float)
    return CascadeData(data, agree, lat, {m: n for m in MODELS})


def synthetic(n=600, seed=0):
    """Cheap models right 85%/80%, agreeing when both right; strong right 95%; 5 folds."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.3
    a = rng.random(n) < np.where(hard, 0.5, 0.99)
    b = rng.random(n) < np.where(hard, 0.4, 0.98)
    s = rng.random(n) < np.where(hard, 0.9, 0.99)
    correct = np.stack([a, b, s], axis=1)
    cd = cascade_data(correct, agree_ab=a & b, folds=np.arange(n) % 5)
    probs = np.clip(np.stack([np.where(hard, 0.5, 0.95), np.where(hard, 0.4, 0.9), np.where(hard, 0.9, 0.97)], 1)
                    + rng.normal(0, 0.03, (n, 3)), 0.01, 0.99)
    return cd, probs
