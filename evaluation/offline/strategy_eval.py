"""Held-out evaluation of strategy routing: the router picks, per request, a single model or a cascade.

    from evaluation.offline.strategy_eval import evaluate_strategy_policy, best_fixed_strategy
    res = evaluate_strategy_policy(cd, probs, target="cost_fraction", cost_fraction=0.2)
    res.outcome.accuracy, res.outcome.usd_per_million, res.params      # held-out, λ per fold

Same folds as the router's: for test fold k, the strategy policy is fitted on the other folds only
(`training.policy.fit.fit_policies`: the menu, each strategy's success regression, λ), with "cheaper" by those
folds' profiled costs and resolve rules fitted on those folds' rows, and scored on fold k. Fitting the policy
that ships is `training.policy.fit.write_strategy_policy`; this module only scores.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from evaluation.offline.routing_eval import profiled_costs
from evaluation.offline.routing_metrics import Outcome, best_single_column
from training.policy.fit import Target, best_fixed_column, default_menu, fit_policies, simulate_all_rows
from training.policy.kinds import kind_named
from training.policy.simulate import CascadeData, Simulated, Spec, pareto_menu, simulate, spec_name
from training.policy.strategy import Strategy

@dataclass
class RowOutcome:
    """What one routing row did on each held-out query."""

    name: str
    correct: np.ndarray  # bool, n
    cost: np.ndarray  # USD, n
    latency: np.ndarray  # seconds, n (NaN where a called model's latency is unknown)
    calls: np.ndarray  # int, n
    escalated: np.ndarray  # bool, n
    params: dict[int, float] = field(default_factory=dict)  # λ per test fold, when there is one
    chosen: Counter = field(default_factory=Counter)  # strategy name -> held-out queries
    per_query: list[str] = field(default_factory=list)  # the strategy run on each query, when it varies

    @property
    def outcome(self) -> Outcome:
        return Outcome(float(self.correct.mean()), float(self.cost.mean()))

    def latency_percentile(self, q: float) -> float:
        lat = self.latency[~np.isnan(self.latency)]
        return float(np.percentile(lat, q)) if len(lat) else float("nan")

    def summary(self) -> dict[str, float]:
        return {"latency_p50_s": self.latency_percentile(50), "latency_p95_s": self.latency_percentile(95),
                "calls_per_request": float(self.calls.mean()), "escalation_rate": float(self.escalated.mean()),
                "cascade_share": float(sum(v for k, v in self.chosen.items() if kind_named(k).compares)
                                       / max(len(self.correct), 1))}


def row_of_choice(name: str, choice: np.ndarray, cd: CascadeData, params: dict | None = None) -> RowOutcome:
    """A single-model routing row (one column per query) as a RowOutcome."""
    rows = np.arange(len(choice))
    d = cd.data
    chosen = Counter(Strategy.single(d.models[j]).name for j in choice)
    return RowOutcome(name, d.correct[rows, choice], d.cost[rows, choice], cd.latency[rows, choice],
                      np.ones(len(choice), int), np.zeros(len(choice), bool), dict(params or {}), chosen)


def _row_of_specs(name: str, picks: np.ndarray, sim: dict[int, Simulated], cd: CascadeData, params: dict) -> RowOutcome:
    """Each held-out row's pick (a column of its fold's simulation) as a RowOutcome."""
    n = len(picks)
    out = RowOutcome(name, np.zeros(n, bool), np.zeros(n), np.zeros(n), np.zeros(n, int), np.zeros(n, bool), params)
    for k, s in sim.items():
        rows = np.flatnonzero(cd.data.folds == k)
        cols = picks[rows]
        out.correct[rows], out.cost[rows] = s.correct[rows, cols], s.cost[rows, cols]
        out.latency[rows], out.calls[rows], out.escalated[rows] = s.latency[rows, cols], s.calls[rows, cols], s.escalated[rows, cols]
    fold_of = cd.data.folds
    out.per_query = [spec_name(sim[fold_of[i]].specs[j], cd.data.models, sim[fold_of[i]].rules.get(j))
                     for i, j in enumerate(picks)]
    out.chosen = Counter(out.per_query)
    return out


def _fold_split(cd: CascadeData, k: int) -> tuple[np.ndarray, np.ndarray]:
    test = cd.data.folds == k
    train = ~test if len(cd.data.fold_ids) > 1 else test
    return np.flatnonzero(train), np.flatnonzero(test)


def fold_simulations(cd: CascadeData, specs: list[Spec] | None = None) -> dict[int, Simulated]:
    """Per fold, every spec simulated on every row, "cheaper" by the fold's profiled costs and resolve rules
    fitted on its training rows. Without `specs`, each fold's menu is `default_menu` on its training rows (a
    large pool's model screen sees no held-out row)."""
    out = {}
    for k in cd.data.fold_ids:
        train = _fold_split(cd, k)[0]
        out[k] = simulate(cd, specs or default_menu(cd, train), profiled_costs(cd.data, train), fit_rows=train)
    return out


def evaluate_strategy_policies(
    cd: CascadeData, probs: np.ndarray, targets: list[Target], names: list[str], *,
    specs: list[Spec] | None = None, sims: dict[int, Simulated] | None = None, **fit_kw,
) -> dict[str, RowOutcome]:
    """The strategy policy at each target, routed on every held-out row, everything fitted on the other folds."""
    sims = sims or fold_simulations(cd, specs)
    picks = np.zeros((len(targets), len(probs)), dtype=int)
    params: list[dict[int, float]] = [{} for _ in targets]
    for k in cd.data.fold_ids:
        train, test = _fold_split(cd, k)
        policies, menu = fit_policies(cd, probs, train, sims[k], sims[k].specs, targets, **fit_kw)
        for i, policy in enumerate(policies):
            picks[i, test] = np.asarray(menu)[policy.choose(probs[test])]
            params[i][k] = policy.lam
    return {name: _row_of_specs(name, picks[i], sims, cd, params[i]) for i, name in enumerate(names)}


def evaluate_strategy_policy(cd: CascadeData, probs: np.ndarray, *, target: str = "cost_fraction",
                             cost_fraction: float = 0.2, name: str = "switchcraft strategies", **kw) -> RowOutcome:
    """One target's row (see `evaluate_strategy_policies`)."""
    return evaluate_strategy_policies(cd, probs, [(target, cost_fraction)], [name], **kw)[name]


def best_fixed_strategy(
    cd: CascadeData, *, target: str = "cost_fraction", cost_fraction: float = 0.2, name: str | None = None,
    specs: list[Spec] | None = None, sims: dict[int, Simulated] | None = None,
) -> RowOutcome:
    """The one strategy (single or cascade) best on the training folds for the target, used for every query."""
    sims = sims or fold_simulations(cd, specs)
    picks = np.zeros(len(cd.data.example_ids), dtype=int)
    for k in cd.data.fold_ids:
        train, test = _fold_split(cd, k)
        picks[test] = best_fixed_column(cd, sims[k], train, target, cost_fraction)
    return _row_of_specs(name or "best fixed strategy", picks, sims, cd, {})


@dataclass
class Ceiling:
    """What routing *without per-request information* reaches on all rows for a cost target: the best one strategy
    within the budget, and the best mix of two (a share of requests to each, spending the budget exactly).
    Chosen on the rows it scores, so optimistic, never a result. A policy can beat it only with what the router
    knows about each request; where it stays below the best single model, meeting the target must come from that."""

    cost_fraction: float
    strategy: str  # the best one strategy within the budget ("" when none fits)
    accuracy: float
    usd_per_million: float
    mix: str  # the mix's two strategies, "a + b (share of b)"; the one strategy when no mix does better
    mix_accuracy: float
    mix_usd_per_million: float
    best_single: str  # the best single model on all rows (the report's per-fold reference may mix two)
    best_single_accuracy: float
    best_single_usd_per_million: float

    @property
    def reaches_best_single(self) -> bool:
        return self.mix_accuracy >= self.best_single_accuracy


def fixed_ceilings(cd: CascadeData, fractions: tuple[float, ...] = (0.1, 0.2), *, specs: list[Spec] | None = None,
                   sim: Simulated | None = None) -> list[Ceiling]:
    """Per cost fraction of the best single model's mean cost (all rows), the `Ceiling`: every menu strategy run
    on every row, resolve rules fitted on the same rows, and the upper hull of their (cost, accuracy) points
    read at the budget."""
    specs = specs or default_menu(cd)
    rows = np.arange(len(cd.data.example_ids))
    sim = sim or simulate_all_rows(cd, specs)
    acc, cost = sim.correct.mean(axis=0), sim.cost.mean(axis=0)
    front = pareto_menu(sim, rows)  # cheapest first, accuracy rising: the hull's vertices are among these
    best = best_single_column(cd.data.correct, cd.data.cost)
    best_acc, best_cost = float(cd.data.correct[:, best].mean()), float(cd.data.cost[:, best].mean())

    def name(j):
        return spec_name(specs[j], cd.data.models, sim.rules.get(j))

    out = []
    for f in fractions:
        budget = f * best_cost
        inside = [j for j in front if cost[j] <= budget]
        if not inside:
            out.append(Ceiling(f, "", float("nan"), float("nan"), "", float("nan"), float("nan"),
                               cd.data.models[best], best_acc, best_cost * 1e6))
            continue
        one = inside[-1]
        mix, mix_acc, mix_cost = name(one), float(acc[one]), float(cost[one])
        for i in inside:
            for j in front:
                if cost[j] > budget:
                    share = (budget - cost[i]) / (cost[j] - cost[i])
                    a = float(acc[i] + share * (acc[j] - acc[i]))
                    if a > mix_acc + 1e-12:
                        mix, mix_acc, mix_cost = f"{name(i)} + {name(j)} ({share:.0%})", a, budget
        out.append(Ceiling(f, name(one), float(acc[one]), float(cost[one] * 1e6), mix, mix_acc, mix_cost * 1e6,
                           cd.data.models[best], best_acc, best_cost * 1e6))
    return out
