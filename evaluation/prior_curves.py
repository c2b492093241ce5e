"""The router's and the category prior's held-out λ curves compared at the same cost (issue 24, a diagnostic).

    .venv/bin/python -m evaluation.category_hard RUN OUT          # once: the branch's held-out parts
    .venv/bin/python -m evaluation.prior_curves RUN OUT [RUN OUT ...] [--resamples 1000]

The done-when compares one operating point per router — the λ rule's, λ chosen on the training folds for a
target — and that point moves a lot between routers of near-equal quality (docs/router.md). This separates the
two things a λ row mixes: how well a router *ranks* (its whole held-out cost–accuracy curve, λ swept over the
grid with the same λ on every fold) and where the λ rule lands on that curve. For each target the category
prior's λ-rule point fixes a cost C; each router's curve is read at C as the most accurate λ whose held-out cost
is ≤ C (a step, no interpolation), the prior's own curve the same way, and the difference is bootstrapped over
queries (the same resamples for both: paired). Both curves are held out and swept alike, so neither has the
operating point chosen for it — the comparison is of ranking, not of the λ rule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def curve_outcomes(probs: np.ndarray, data) -> tuple[np.ndarray, np.ndarray]:
    """Per λ of the grid: held-out (correct [g, n], cost [g, n]), per-fold profiled costs (`routing_eval.sweep`)."""
    from evaluation.routing_eval import LAMBDA_GRID, profiled_costs
    from serving.policy import choose_batch_lambda

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


def bootstrap_curves(named: dict[str, np.ndarray], data, idx: np.ndarray) -> dict[str, tuple[np.ndarray, ...]]:
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


def compare_curves(run: Path, out: Path, *, resamples: int = 1000, seed: int = 0) -> list[dict]:
    from evaluation.category_hard import BRANCH_FILE, routers_of
    from evaluation.prior_gap import TARGETS
    from evaluation.routing_eval import evaluate_router

    br = dict(np.load(out / BRANCH_FILE, allow_pickle=False))
    data, routers, prior = routers_of(run, br)
    shipped = next(iter(routers))
    named = {"shipped router": routers[shipped], "guessed-category lookup": routers["hard alone"], "category prior": prior}
    n = len(prior)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    curves = bootstrap_curves(named, data, idx)  # once for every target
    rows = np.arange(n)
    res = []
    for target, what in TARGETS:
        point = evaluate_router("category prior", prior, data, target=target, rule="lambda").choice
        p_ok, p_usd = data.correct[rows, point], data.cost[rows, point]
        for name, (v, ref, lo, hi) in read_at_cost(curves, "category prior", p_usd, idx).items():
            res.append({"run": str(run), "target": what, "prior point": f"{p_ok.mean():.3f} @ ${p_usd.mean() * 1e6:,.0f}/M",
                        "router": name, "curve at the prior's cost": f"{v:.3f}",
                        "prior's curve there": f"{ref:.3f}", "Δ [95% CI]": f"{v - ref:+.3f} [{lo:+.3f}, {hi:+.3f}]",
                        "not below": bool(hi >= 0)})
    return res


def main(argv: list[str]) -> None:
    import pandas as pd

    from evaluation.report import _md

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", type=Path, help="RUN OUT pairs (OUT: evaluation.category_hard's)")
    ap.add_argument("--resamples", type=int, default=1000)
    a = ap.parse_args(argv)
    if len(a.pairs) % 2:
        ap.error("give RUN OUT pairs")
    rows = []
    for run, out in zip(a.pairs[::2], a.pairs[1::2]):
        rows += compare_curves(run, out, resamples=a.resamples)
    print(_md(pd.DataFrame(rows)))


if __name__ == "__main__":
    main(sys.argv[1:])
