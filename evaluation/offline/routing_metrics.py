"""Metrics of a routed choice, on held-out data. Definitions: docs/metrics.md.

Everything works on three aligned matrices over (queries × pool models):
`correct` (bool: the model's recorded answer was exactly right), `cost`
(USD: that answer's real cost), and, for routers, `probs` (predicted
P(correct)). A routing policy is just a column index per query.

    from evaluation.offline.routing_metrics import Outcome, outcome_of, oracle_choice
    o = outcome_of(choice, correct, cost)      # accuracy, mean cost, $/M queries
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Outcome:
    accuracy: float
    mean_cost_usd: float

    @property
    def usd_per_million(self) -> float:
        return self.mean_cost_usd * 1e6

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "usd_per_million": self.usd_per_million}


def outcome_of(choice: np.ndarray, correct: np.ndarray, cost: np.ndarray) -> Outcome:
    """Accuracy and mean real cost of picking column `choice[i]` for query i."""
    rows = np.arange(len(choice))
    if len(choice) == 0:
        raise ValueError("no queries to evaluate")
    return Outcome(float(correct[rows, choice].mean()), float(cost[rows, choice].mean()))


def oracle_choice(correct: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The cheapest model that is correct; when none is, the cheapest model."""
    masked = np.where(correct, cost, np.inf)
    any_correct = correct.any(axis=1)
    return np.where(any_correct, np.argmin(masked, axis=1), np.argmin(cost, axis=1))


def random_outcome(correct: np.ndarray, cost: np.ndarray, seeds: int = 10) -> Outcome:
    """Uniformly random model per query, averaged over `seeds` seeds."""
    outs = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        outs.append(outcome_of(rng.integers(0, correct.shape[1], len(correct)), correct, cost))
    return Outcome(float(np.mean([o.accuracy for o in outs])), float(np.mean([o.mean_cost_usd for o in outs])))


def best_single_column(correct: np.ndarray, cost: np.ndarray) -> int:
    """Most accurate model (ties: cheaper). Call it on training rows only."""
    acc = correct.mean(axis=0)
    mean_cost = cost.mean(axis=0)
    return int(np.lexsort((mean_cost, -acc))[0])


def cheapest_column(cost: np.ndarray) -> int:
    return int(np.argmin(cost.mean(axis=0)))


def gap_closed(router: Outcome, best_single: Outcome, oracle: Outcome) -> float:
    """Share of the accuracy gap between the best single model and the oracle that the router closes."""
    gap = oracle.accuracy - best_single.accuracy
    return float("nan") if gap <= 0 else (router.accuracy - best_single.accuracy) / gap


def savings(router: Outcome, reference: Outcome) -> float:
    """1 − router cost / reference cost (0.84 = 84% cheaper)."""
    return float("nan") if reference.mean_cost_usd <= 0 else 1.0 - router.mean_cost_usd / reference.mean_cost_usd


# --- curves -------------------------------------------------------------------


def nondecreasing_hull(costs: np.ndarray, accs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing upper convex hull of (cost, accuracy) points (RouterBench).

    A point on the hull is reachable by mixing two routers at random, and
    paying more never has to buy less accuracy, hence "non-decreasing".
    """
    order = np.lexsort((-accs, costs))
    pts = [(float(costs[i]), float(accs[i])) for i in order]
    # Keep only points that improve accuracy as cost grows.
    frontier: list[tuple[float, float]] = []
    for c, a in pts:
        if frontier and a <= frontier[-1][1]:
            continue
        frontier.append((c, a))
    hull: list[tuple[float, float]] = []
    for p in frontier:
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()
        hull.append(p)
    return np.array([c for c, _ in hull]), np.array([a for _, a in hull])


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def aiq(costs: np.ndarray, accs: np.ndarray, c_min: float, c_max: float) -> float:
    """Average accuracy of the non-decreasing hull over the cost range [c_min, c_max].

    RouterBench's AIQ: ∫ hull(c) dc / (c_max − c_min). Below the cheapest
    hull point the hull is undefined: we count 0 accuracy there; above the
    dearest, the hull stays flat at its last accuracy.
    """
    if c_max <= c_min:
        raise ValueError("aiq needs c_max > c_min")
    hc, ha = nondecreasing_hull(np.asarray(costs, float), np.asarray(accs, float))
    grid = np.linspace(c_min, c_max, 2001)
    vals = np.interp(grid, hc, ha, left=0.0, right=ha[-1])
    vals[grid < hc[0]] = 0.0
    return float(np.trapezoid(vals, grid) / (c_max - c_min))


def apgr(costs: np.ndarray, accs: np.ndarray, weak: Outcome, strong: Outcome) -> float:
    """Average performance gap recovered (RouteLLM), generalised to a pool.

    PGR(c) = (acc(c) − acc_weak) / (acc_strong − acc_weak), where acc(c) is
    the router's non-decreasing hull at cost c; averaged over the cost range
    from the weak (cheapest) model's cost to the strong (best single) model's.
    """
    gap = strong.accuracy - weak.accuracy
    if gap <= 0 or strong.mean_cost_usd <= weak.mean_cost_usd:
        return float("nan")
    hc, ha = nondecreasing_hull(np.asarray(costs, float), np.asarray(accs, float))
    grid = np.linspace(weak.mean_cost_usd, strong.mean_cost_usd, 2001)
    acc = np.interp(grid, hc, ha, left=weak.accuracy, right=ha[-1])
    acc[grid < hc[0]] = weak.accuracy
    acc = np.maximum(acc, weak.accuracy)  # one can always route everything to the weak model
    return float(np.trapezoid((acc - weak.accuracy) / gap, grid) / (grid[-1] - grid[0]))
