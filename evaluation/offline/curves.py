"""Held-out λ curves read at a cost: how well a router ranks, apart from where the λ rule lands on its curve.

    from evaluation.offline.curves import bootstrap_curves, read_at_cost
    curves = bootstrap_curves({"router": p, "category prior": prior}, data, idx)   # idx: [resamples, n]
    read_at_cost(curves, "category prior", prior_cost_per_query, idx)              # name -> (v, ref, lo, hi)

A λ row is one operating point (λ chosen on the training folds for a target), and that point moves a lot
between routers of near-equal quality. A router's whole held-out cost–accuracy curve (λ swept over
`routing_eval.LAMBDA_GRID`, the same λ on every fold, costs profiled on each fold's training rows) separates
the two. The report (`router_vs_prior`) reads each curve at the cost C of the category prior's λ-rule point,
as the most accurate λ whose held-out cost is ≤ C (a step, no interpolation), the prior's own curve the same
way, and bootstraps the difference over queries (the same resamples for both: paired).
"""

from __future__ import annotations

import numpy as np

from evaluation.offline.routing_eval import LAMBDA_GRID, RoutingData, profiled_costs
from serving.policy import choose_batch_lambda


def curve_outcomes(probs: np.ndarray, data: RoutingData) -> tuple[np.ndarray, np.ndarray]:
    """Per λ of the grid: held-out (correct [g, n], cost [g, n]), per-fold profiled costs (`routing_eval.sweep`)."""
    n = len(probs)
    fold_costs = {k: profiled_costs(data, data.folds != k) for k in data.fold_ids}
    ok, paid = np.zeros((len(LAMBDA_GRID), n), bool), np.zeros((len(LAMBDA_GRID), n))
    rows = np.arange(n)
    for i, lam in enumerate(LAMBDA_GRID):
        choice = np.zeros(n, int)
        for k, costs in fold_costs.items():
            at = data.folds == k
            choice[at] = choose_batch_lambda(probs[at], costs, lam)
        ok[i], paid[i] = data.correct[rows, choice], data.cost[rows, choice]
    return ok, paid


def best_within(acc: np.ndarray, usd: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Per column (resample): the highest accuracy among the grid points whose cost is ≤ the budget (the cheapest
    point's accuracy if none is)."""
    allowed = usd <= budget[None, :] + 1e-12
    cheapest = acc[usd.argmin(axis=0), np.arange(acc.shape[1])]
    return np.where(allowed.any(axis=0), np.where(allowed, acc, -np.inf).max(axis=0), cheapest)


def bootstrap_curves(named: dict[str, np.ndarray], data: RoutingData, idx: np.ndarray) -> dict[str, tuple[np.ndarray, ...]]:
    """Per router: its held-out λ curve (accuracy [g, 1], $ [g, 1]) and the same on each resample of `idx`
    ([resamples, n] query indices; [g, resamples] each) — computed once, read at any cost."""
    out = {}
    for name, p in named.items():
        ok, paid = curve_outcomes(p, data)
        out[name] = (ok.mean(axis=1)[:, None], paid.mean(axis=1)[:, None],
                     np.stack([ok[:, r].mean(axis=1) for r in idx], axis=1),
                     np.stack([paid[:, r].mean(axis=1) for r in idx], axis=1))
    return out


def read_at_cost(curves: dict[str, tuple[np.ndarray, ...]], reference: str, point_usd: np.ndarray, idx: np.ndarray
                 ) -> dict[str, tuple[float, float, float, float]]:
    """Every other curve read at the cost of the reference's operating point (`point_usd`: its cost per query,
    n), against the reference's own curve there, paired on the same resamples: name -> (curve accuracy, the
    reference curve's accuracy, the difference's 95% interval low, high)."""
    budget, budget_all = point_usd[idx].mean(axis=1), np.array([point_usd.mean()])
    read = {name: (best_within(acc, usd, budget_all)[0], best_within(acc_b, usd_b, budget))
            for name, (acc, usd, acc_b, usd_b) in curves.items()}
    ref, ref_b = read[reference]
    out = {}
    for name, (v, vb) in read.items():
        if name != reference:
            lo, hi = np.percentile(vb - ref_b, [2.5, 97.5])
            out[name] = (float(v), float(ref), float(lo), float(hi))
    return out
