"""Evaluate routers against baselines on the same held-out folds.

    from evaluation.offline.routing_eval import RoutingData, evaluate_router
    data = RoutingData.from_labels(labels, examples, models, folds)
    result = evaluate_router("router", oof_probs, data, target="match_best")

Every number is from held-out rows: for test fold k, everything chosen from
data (the profiled costs the policy uses, the best single model, the
calibrated threshold) comes from the other folds only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from data.schema import Example, Label
from evaluation.offline.routing_metrics import (
    Outcome,
    aiq,
    apgr,
    best_single_column,
    cheapest_column,
    oracle_choice,
    outcome_of,
    random_outcome,
)
from serving.policy import choose_batch, choose_batch_lambda

if TYPE_CHECKING:
    import pandas as pd

TAU_GRID = np.round(np.linspace(0.0, 1.0, 101), 2)
LAMBDA_GRID = np.geomspace(1e-6, 10.0, 121)


@dataclass
class RoutingData:
    """Aligned (queries × models) matrices of real outcomes, with fold assignment."""

    example_ids: list[str]
    categories: np.ndarray
    models: list[str]
    correct: np.ndarray  # bool, n × m
    cost: np.ndarray  # USD, n × m
    folds: np.ndarray  # int, n
    imputed_costs: dict[str, int] = field(default_factory=dict)  # model -> rows whose cost was imputed

    @classmethod
    def from_labels(
        cls, labels: Sequence[Label], examples: Mapping[str, Example] | None, models: Sequence[str], folds: Mapping[str, int]
    ) -> RoutingData:
        """Build from Label records; only examples labelled for every model and assigned a fold."""
        by_key = {(lb.example_id, lb.model): lb for lb in labels}
        ids = sorted({lb.example_id for lb in labels if lb.example_id in folds})
        missing = [(e, m) for e in ids for m in models if (e, m) not in by_key]
        if missing:
            raise ValueError(f"{len(missing)} (example, model) pairs have no label, e.g. {missing[:3]}; label the whole pool first")
        correct = np.array([[by_key[(e, m)].correct for m in models] for e in ids], dtype=bool)
        cost = np.array([[np.nan if (c := by_key[(e, m)].cost_usd) is None else c for m in models] for e in ids], dtype=float)
        unknown = np.isnan(cost)
        never = [m for j, m in enumerate(models) if unknown[:, j].all()]
        if never:
            raise ValueError(f"models without any recorded cost (no token usage): {never}; a cost-aware router needs it")
        # A few calls with no recorded usage (gemini-1.5-flash: 24 of 1,630) take the model's mean known cost.
        cost = np.where(unknown, np.nanmean(cost, axis=0, keepdims=True), cost)
        imputed = {m: int(unknown[:, j].sum()) for j, m in enumerate(models) if unknown[:, j].any()}
        cats = np.array([examples[e].category if examples and e in examples else e.split(":")[-1].rsplit("_", 1)[0] for e in ids])
        return cls(list(ids), cats, list(models), correct, cost, np.array([folds[e] for e in ids], dtype=int), imputed)

    def subset(self, rows: np.ndarray) -> RoutingData:
        return RoutingData(
            [self.example_ids[i] for i in np.flatnonzero(rows)] if rows.dtype == bool else [self.example_ids[i] for i in rows],
            self.categories[rows], self.models, self.correct[rows], self.cost[rows], self.folds[rows], self.imputed_costs,
        )

    @property
    def fold_ids(self) -> list[int]:
        return sorted(set(self.folds.tolist()))


def oof_matrix(oof: pd.DataFrame, data_ids: list[str], models: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Long out-of-fold table (example_id, fold, model, prob: `training.recipe.OOF_FILE`) → (n × m probabilities
    in `data_ids` × `models` order, folds by id)."""
    wide = oof.pivot_table(index="example_id", columns="model", values="prob", aggfunc="first")
    missing = [m for m in models if m not in wide.columns]
    if missing:
        raise ValueError(f"out-of-fold predictions have no column for {missing}")
    folds = oof.drop_duplicates("example_id").set_index("example_id")["fold"].astype(int).to_dict()
    return wide.reindex(data_ids)[models].to_numpy(dtype=float), folds


@dataclass
class RouterResult:
    name: str
    choice: np.ndarray  # column per query, held-out
    outcome: Outcome
    taus: dict[int, float] = field(default_factory=dict)  # τ (or λ, for rule="lambda") chosen per test fold
    curve: list[tuple[float, float, float]] = field(default_factory=list)  # (τ or λ, cost, accuracy)
    lambda_curve: list[tuple[float, float, float]] = field(default_factory=list)
    rule: str = "tau"  # "tau": cheapest model above τ (the paper's); "lambda": argmax λ·p − cost


def profiled_costs(data: RoutingData, train: np.ndarray) -> np.ndarray:
    """Mean real cost per query of each model on the training rows."""
    return data.cost[train].mean(axis=0)


RULES = {"tau": (TAU_GRID, choose_batch), "lambda": (LAMBDA_GRID, choose_batch_lambda)}


def choose_tau(
    probs: np.ndarray, correct: np.ndarray, cost: np.ndarray, costs: np.ndarray, *, target: str,
    budget_per_million: float | None = None, cost_fraction: float = 0.1, rule: str = "tau",
) -> float:
    """Pick τ on validation rows for a target (λ instead, over its grid, for `rule="lambda"`).

    - "match_best": the cheapest τ whose accuracy is at least the best single
      model's on these rows (if none reaches it, the most accurate τ).
    - "budget": the most accurate τ whose mean cost is within
      `budget_per_million` USD per million queries.
    - "cost_fraction": the most accurate τ whose mean cost is at most
      `cost_fraction` × the best single model's (the issue's "best single
      model's accuracy at ≤ 10% of its cost" operating point).
    """
    best = outcome_of(np.full(len(probs), best_single_column(correct, cost)), correct, cost)
    if target == "cost_fraction":
        target, budget_per_million = "budget", cost_fraction * best.usd_per_million
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; use 'tau' or 'lambda'")
    grid, choose = RULES[rule]
    points = [(t, outcome_of(choose(probs, costs, t), correct, cost)) for t in grid]
    return float(best_point(points, best, target, budget_per_million))


def best_point(points: Sequence[tuple[Any, Outcome]], best: Outcome, target: str,
               budget_per_million: float | None = None) -> Any:
    """The key of the (key, outcome) point a target picks (`choose_tau`'s criterion; `best`: the best single
    model's outcome on the same rows): "match_best", the cheapest point at least as accurate as `best` (none:
    the most accurate, then the cheaper); "budget", the most accurate within `budget_per_million` USD per
    million queries (then the cheaper; none: the cheapest). Ties keep the first point."""
    if target == "match_best":
        ok = [p for p in points if p[1].accuracy >= best.accuracy]
        if ok:
            return min(ok, key=lambda p: (p[1].mean_cost_usd, -p[1].accuracy))[0]
        return max(points, key=lambda p: (p[1].accuracy, -p[1].mean_cost_usd))[0]
    if target == "budget":
        if budget_per_million is None:
            raise ValueError("target='budget' needs budget_per_million")
        ok = [p for p in points if p[1].usd_per_million <= budget_per_million]
        if ok:
            return min(ok, key=lambda p: (-p[1].accuracy, p[1].mean_cost_usd))[0]
        return min(points, key=lambda p: p[1].mean_cost_usd)[0]
    raise ValueError(f"unknown target {target!r}; use 'match_best', 'budget' or 'cost_fraction'")


def evaluate_router(
    name: str,
    probs: np.ndarray,
    data: RoutingData,
    *,
    target: str = "match_best",
    budget_per_million: float | None = None,
    fixed_tau: float | None = None,
    rule: str = "tau",
) -> RouterResult:
    """Route every held-out row with τ (or λ) calibrated on the other folds (or `fixed_tau`)."""
    if probs.shape != data.correct.shape:
        raise ValueError(f"{name}: probabilities shape {probs.shape} != labels {data.correct.shape}")
    choice = np.zeros(len(probs), dtype=int)
    taus = {}
    for k in data.fold_ids:
        test = data.folds == k
        train = ~test if len(data.fold_ids) > 1 else test
        costs = profiled_costs(data, train)
        tau = fixed_tau
        if tau is None:
            tau = choose_tau(probs[train], data.correct[train], data.cost[train], costs, target=target,
                             budget_per_million=budget_per_million, rule=rule)
        taus[k] = tau
        choice[test] = RULES[rule][1](probs[test], costs, tau)
    result = RouterResult(name, choice, outcome_of(choice, data.correct, data.cost), taus, rule=rule)
    result.curve = sweep(probs, data, "tau")
    result.lambda_curve = sweep(probs, data, "lambda")
    return result


def sweep(probs: np.ndarray, data: RoutingData, kind: str) -> list[tuple[float, float, float]]:
    """(parameter, cost, accuracy) over the τ or λ grid, held-out rows, per-fold profiled costs."""
    grid = TAU_GRID if kind == "tau" else LAMBDA_GRID
    out = []
    fold_costs = {k: profiled_costs(data, data.folds != k if len(data.fold_ids) > 1 else data.folds == k) for k in data.fold_ids}
    for g in grid:
        choice = np.zeros(len(probs), dtype=int)
        for k, costs in fold_costs.items():
            rows = data.folds == k
            choice[rows] = (choose_batch if kind == "tau" else choose_batch_lambda)(probs[rows], costs, g)
        o = outcome_of(choice, data.correct, data.cost)
        out.append((float(g), o.mean_cost_usd, o.accuracy))
    return out


@dataclass
class References:
    singles: dict[str, Outcome]
    best_single: RouterResult
    cheapest: RouterResult
    oracle: Outcome
    random: Outcome


def references(data: RoutingData) -> References:
    """Every single model, the best single and the cheapest model (chosen on training folds), oracle, random."""
    n = len(data.example_ids)
    singles = {m: outcome_of(np.full(n, j), data.correct, data.cost) for j, m in enumerate(data.models)}
    best = np.zeros(n, dtype=int)
    cheap = np.zeros(n, dtype=int)
    for k in data.fold_ids:
        test = data.folds == k
        train = ~test if len(data.fold_ids) > 1 else test
        best[test] = best_single_column(data.correct[train], data.cost[train])
        cheap[test] = cheapest_column(data.cost[train])
    return References(
        singles=singles,
        best_single=RouterResult("best single model", best, outcome_of(best, data.correct, data.cost)),
        cheapest=RouterResult("cheapest model", cheap, outcome_of(cheap, data.correct, data.cost)),
        oracle=outcome_of(oracle_choice(data.correct, data.cost), data.correct, data.cost),
        random=random_outcome(data.correct, data.cost),
    )


def curve_scores(result: RouterResult, refs: References, data: RoutingData) -> dict[str, float]:
    """AIQ over the pool's cost range and APGR between the cheapest and the best single model."""
    costs = np.array([c for _, c, _ in result.curve])
    accs = np.array([a for _, _, a in result.curve])
    single_costs = [o.mean_cost_usd for o in refs.singles.values()]
    return {
        "aiq": aiq(costs, accs, min(single_costs), max(single_costs)),
        "apgr": apgr(costs, accs, refs.cheapest.outcome, refs.best_single.outcome),
    }


def per_category(choices: Mapping[str, np.ndarray], data: RoutingData) -> dict[str, dict[str, float]]:
    """Accuracy per category for each named choice vector."""
    out: dict[str, dict[str, float]] = {}
    for cat in sorted(set(data.categories.tolist())):
        rows = data.categories == cat
        out[cat] = {"n": int(rows.sum())}
        for name, choice in choices.items():
            idx = np.flatnonzero(rows)
            out[cat][name] = float(data.correct[idx, choice[idx]].mean())
    return out
