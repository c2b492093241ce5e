"""Held-out evaluation of strategy routing: the router picks, per request, a single model or a cascade.

    from evaluation.strategy_eval import evaluate_strategy_policy, best_fixed_strategy
    res = evaluate_strategy_policy(cd, probs, target="cost_fraction", cost_fraction=0.2)
    res.outcome.accuracy, res.outcome.usd_per_million, res.params      # held-out, λ per fold

Same folds as the router's: for test fold k, the menu (the training rows'
cost–accuracy frontier of every single model and cascade), each strategy's
success regression, and λ are chosen on the other folds only; λ on
cross-fitted predictions (inner folds of the training rows), so the rows that
choose λ are never the rows the regressions were fitted on.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from sklearn.model_selection import KFold

from evaluation.routing_eval import profiled_costs
from evaluation.routing_metrics import Outcome, best_single_column
from evaluation.strategies import CascadeData, Simulated, Spec, menu_of, pareto_menu, simulate, spec_name
from serving.strategy import Strategy
from serving.strategy_policy import StrategyPolicy

MENU_LIMIT = 24  # strategies kept from the training frontier (evenly along it)


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
                "cascade_share": float(sum(v for k, v in self.chosen.items() if k.startswith("agree(")) / max(len(self.correct), 1))}


def row_of_choice(name: str, choice: np.ndarray, cd: CascadeData, params: dict | None = None) -> RowOutcome:
    """A single-model routing row (one column per query) as a RowOutcome."""
    rows = np.arange(len(choice))
    d = cd.data
    chosen = Counter(f"single({d.models[j]})" for j in choice)
    return RowOutcome(name, d.correct[rows, choice], d.cost[rows, choice], cd.latency[rows, choice],
                      np.ones(len(choice), int), np.zeros(len(choice), bool), dict(params or {}), chosen)


def _row_of_specs(name: str, picks: np.ndarray, sim: dict[int, Simulated], cd: CascadeData, specs: list[Spec],
                  params: dict) -> RowOutcome:
    n = len(picks)
    out = RowOutcome(name, np.zeros(n, bool), np.zeros(n), np.zeros(n), np.zeros(n, int), np.zeros(n, bool), params)
    for k, s in sim.items():
        rows = np.flatnonzero(cd.data.folds == k)
        cols = picks[rows]
        out.correct[rows], out.cost[rows] = s.correct[rows, cols], s.cost[rows, cols]
        out.latency[rows], out.calls[rows], out.escalated[rows] = s.latency[rows, cols], s.calls[rows, cols], s.escalated[rows, cols]
    out.per_query = [spec_name(specs[j], cd.data.models) for j in picks]
    out.chosen = Counter(out.per_query)
    return out


def lambda_grid(costs: np.ndarray, steps: int = 161) -> np.ndarray:
    """λ from a tenth of the cheapest strategy's cost (any accuracy is worth it) to 1,000 × the dearest
    (only a 0.1% gain is): scale-free, so a pool priced in any unit gets the same resolution."""
    pos = costs[costs > 0]
    lo, hi = (0.1 * pos.min(), 1e3 * pos.max()) if len(pos) else (1e-6, 10.0)
    return np.geomspace(lo, hi, steps)


def _fold_split(cd: CascadeData, k: int) -> tuple[np.ndarray, np.ndarray]:
    test = cd.data.folds == k
    train = ~test if len(cd.data.fold_ids) > 1 else test
    return np.flatnonzero(train), np.flatnonzero(test)


def _pick_lambda(points: list[tuple[float, float, float]], *, target: str, best_acc: float, budget: float | None) -> float:
    """points: (λ, accuracy, mean cost) on training rows. The same targets as routing_eval.choose_tau."""
    if target == "match_best":
        ok = [(c, -a, lam) for lam, a, c in points if a >= best_acc]
        return float(min(ok)[2]) if ok else float(max(points, key=lambda p: (p[1], -p[2]))[0])
    ok = [(-a, c, lam) for lam, a, c in points if c <= budget]
    return float(min(ok)[2]) if ok else float(min(points, key=lambda p: p[2])[0])


def _budget(cd: CascadeData, train: np.ndarray, target: str, cost_fraction: float) -> tuple[float, float | None]:
    d = cd.data
    j = best_single_column(d.correct[train], d.cost[train])
    best_acc, best_cost = float(d.correct[train, j].mean()), float(d.cost[train, j].mean())
    return best_acc, (cost_fraction * best_cost if target == "cost_fraction" else None)


def fold_simulations(cd: CascadeData, specs: list[Spec]) -> dict[int, Simulated]:
    """Every spec simulated on every row, "cheaper" by each fold's profiled costs (training rows)."""
    return {k: simulate(cd, specs, profiled_costs(cd.data, _fold_split(cd, k)[0])) for k in cd.data.fold_ids}


def to_strategy(spec: Spec, models: list[str]) -> Strategy:
    a, b, t, e = spec
    if a == b:
        return Strategy.single(models[a])
    return Strategy.agree(models[a], models[b], tie_breaker=None if t is None else models[t], escalate=(models[e],))


Target = tuple[str, float]  # ("match_best" | "cost_fraction", the cost fraction for "cost_fraction")


def fit_policies(cd: CascadeData, probs: np.ndarray, rows: np.ndarray, sim: Simulated, specs: list[Spec],
                 targets: list[Target], *, inner_folds: int = 5, menu_limit: int = MENU_LIMIT, slack: float = 0.0,
                 seed: int = 0) -> tuple[list[StrategyPolicy], list[int]]:
    """Policies fitted on `rows` alone, one per target: their frontier as the menu, the same regressions,
    λ per target from cross-fitted (inner-fold) estimates."""
    models = cd.data.models
    menu = pareto_menu(sim, rows, limit=menu_limit, slack=slack)
    strategies = [to_strategy(specs[j], models) for j in menu]
    ok, paid = sim.correct[np.ix_(rows, menu)], sim.cost[np.ix_(rows, menu)]
    inner = np.zeros((len(rows), len(menu)))
    for fit_rows, pred_rows in KFold(min(inner_folds, len(rows)), shuffle=True, random_state=seed).split(rows):
        pol = StrategyPolicy.fit(models, strategies, probs[rows[fit_rows]], ok[fit_rows], paid[fit_rows])
        inner[pred_rows] = pol.success(probs[rows[pred_rows]])
    costs, idx = paid.mean(axis=0), np.arange(len(rows))
    points = []
    for lam in lambda_grid(costs):
        c = np.argmax(lam * inner - costs[None, :], axis=1)
        points.append((float(lam), float(ok[idx, c].mean()), float(paid[idx, c].mean())))
    base = StrategyPolicy.fit(models, strategies, probs[rows], ok, paid)
    out = []
    for target, fraction in targets:
        best_acc, budget = _budget(cd, rows, target, fraction)
        out.append(replace(base, lam=_pick_lambda(points, target=target, best_acc=best_acc, budget=budget)))
    return out, menu


def evaluate_strategy_policies(
    cd: CascadeData, probs: np.ndarray, targets: list[Target], names: list[str], *,
    specs: list[Spec] | None = None, sims: dict[int, Simulated] | None = None, **fit_kw,
) -> dict[str, RowOutcome]:
    """The strategy policy at each target, routed on every held-out row, everything fitted on the other folds."""
    specs = specs or menu_of(len(cd.data.models))
    sims = sims or fold_simulations(cd, specs)
    picks = np.zeros((len(targets), len(probs)), dtype=int)
    params: list[dict[int, float]] = [{} for _ in targets]
    for k in cd.data.fold_ids:
        train, test = _fold_split(cd, k)
        policies, menu = fit_policies(cd, probs, train, sims[k], specs, targets, **fit_kw)
        for i, policy in enumerate(policies):
            picks[i, test] = np.asarray(menu)[policy.choose(probs[test])]
            params[i][k] = policy.lam
    return {name: _row_of_specs(name, picks[i], sims, cd, specs, params[i]) for i, name in enumerate(names)}


def evaluate_strategy_policy(cd: CascadeData, probs: np.ndarray, *, target: str = "cost_fraction",
                             cost_fraction: float = 0.2, name: str = "switchcraft strategies", **kw) -> RowOutcome:
    """One target's row (see `evaluate_strategy_policies`)."""
    return evaluate_strategy_policies(cd, probs, [(target, cost_fraction)], [name], **kw)[name]


def best_fixed_strategy(
    cd: CascadeData, *, target: str = "cost_fraction", cost_fraction: float = 0.2, name: str | None = None,
    specs: list[Spec] | None = None, sims: dict[int, Simulated] | None = None,
) -> RowOutcome:
    """The one strategy (single or cascade) best on the training folds for the target, used for every query."""
    specs = specs or menu_of(len(cd.data.models))
    sims = sims or fold_simulations(cd, specs)
    picks = np.zeros(len(cd.data.example_ids), dtype=int)
    for k in cd.data.fold_ids:
        train, test = _fold_split(cd, k)
        acc, cost = sims[k].correct[train].mean(axis=0), sims[k].cost[train].mean(axis=0)
        best_acc, budget = _budget(cd, train, target, cost_fraction)
        if target == "match_best":
            ok = np.flatnonzero(acc >= best_acc)
            j = int(ok[np.argmin(cost[ok])]) if len(ok) else int(np.argmax(acc))
        else:
            ok = np.flatnonzero(cost <= budget)
            j = int(ok[np.lexsort((cost[ok], -acc[ok]))[0]]) if len(ok) else int(np.argmin(cost))
        picks[test] = j
    return _row_of_specs(name or "best fixed strategy", picks, sims, cd, specs, {})


def deployable_policy(cd: CascadeData, probs: np.ndarray, *, target: str = "cost_fraction", cost_fraction: float = 0.2,
                      **fit_kw) -> StrategyPolicy:
    """The policy to serve: menu, regressions and λ fitted on every held-out row (λ cross-fitted)."""
    specs = menu_of(len(cd.data.models))
    rows = np.arange(len(probs))
    sim = simulate(cd, specs, cd.data.cost.mean(axis=0))
    return fit_policies(cd, probs, rows, sim, specs, [(target, cost_fraction)], **fit_kw)[0][0]


def write_strategy_policy(router_dir: str | Path, cd: CascadeData, probs: np.ndarray, *, cost_fraction: float = 0.2) -> Path:
    """The deployable policy into `<router_dir>/router.json` (`strategy_policy`): `switchcraft export` and the
    Triton repository carry it to serving, where RouterClient runs it."""
    policy = deployable_policy(cd, probs, target="cost_fraction", cost_fraction=cost_fraction)
    path = Path(router_dir) / "router.json"
    info = json.loads(path.read_text())
    if list(info.get("models") or []) != cd.data.models:
        raise ValueError(f"{path}: the router is over {info.get('models')}, the evaluation over {cd.data.models}")
    info["strategy_policy"] = {**policy.to_json(), "target": f"cost_fraction {cost_fraction}",
                               "fitted_on": f"{len(probs)} labelled queries (out-of-fold router probabilities)"}
    path.write_text(json.dumps(info, indent=2, default=str))
    return path
