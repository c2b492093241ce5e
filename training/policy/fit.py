"""Fitting the strategy policy that ships: the menu, each strategy's success regression and λ, into router.json.

    from training.policy.fit import write_strategy_policy
    write_strategy_policy("runs/default/router", cd, oof_probs)                   # ≤ 20% of the best single's cost
    write_strategy_policy(router_dir, cd, oof_probs, budget_usd_per_million=300)  # a budget no label moves

`fit_policies` fits on the rows it is given: the menu (the rows' cost–accuracy frontier of every single model
and cascade, `training.policy.simulate`), the regressions (`StrategyPolicy.fit`), and per cost target the
regularisation `c` and λ that do best on cross-fitted predictions (inner folds of those rows), so the rows
that choose λ are never the rows the regressions were fitted on. `write_strategy_policy` runs it on every
labelled query (the router's out-of-fold probabilities) and writes the result into `router.json`, where
`switchcraft export`, the Triton repository and `serving.client.RouterClient` read it. Scoring the same
fit held-out, fold by fold, is `evaluation.offline.strategy_eval`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.model_selection import KFold

from training.policy.policy import StrategyPolicy
from training.policy.simulate import (RULE_TOLERANCES, CascadeData, Simulated, Spec, menu_of, pareto_menu, simulate,
                                      to_strategy)

MENU_LIMIT = 24  # strategies kept from the training frontier (evenly along it)
MENU_MODELS = 8  # the most models a menu's agreements are built from (every model stays a single)
# The screen keeps models of the strategies within this accuracy of its frontier: one that a tie-breaker or a
# resolve rule could lift onto the full menu's frontier. Set once (a point of accuracy), not tuned.
SCREEN_SLACK = 0.01


def best_single_column(correct: np.ndarray, cost: np.ndarray) -> int:
    """Most accurate model (ties: cheaper). Call it on training rows only."""
    acc = correct.mean(axis=0)
    mean_cost = cost.mean(axis=0)
    return int(np.lexsort((mean_cost, -acc))[0])


def lambda_grid(costs: np.ndarray, steps: int = 161) -> np.ndarray:
    """λ from a tenth of the cheapest strategy's cost (any accuracy is worth it) to 1,000 × the dearest
    (only a 0.1% gain is): scale-free, so a pool priced in any unit gets the same resolution."""
    pos = costs[costs > 0]
    lo, hi = (0.1 * pos.min(), 1e3 * pos.max()) if len(pos) else (1e-6, 10.0)
    return np.geomspace(lo, hi, steps)


def _pick_lambda(points: list[tuple[float, float, float]], *, target: str, best_acc: float, budget: float | None) -> float:
    """points: (λ, accuracy, mean cost) on training rows, λ ascending. The same targets as routing_eval.choose_tau;
    ties go to the smaller λ."""
    return float(min(points, key=lambda p: _target_key(p, target, best_acc, budget))[0])


def target_budget(cd: CascadeData, train: np.ndarray, target: str, cost_fraction: float) -> tuple[float, float | None]:
    """(the best single model's accuracy on `train`, the mean cost per query the target allows). Targets:
    "match_best" (no budget), "cost_fraction" (`cost_fraction` × the best single model's mean cost: read off
    the labels, so labels that swap two near-tied top models move it) and "budget" (`cost_fraction` is then
    the budget itself, USD per query: given by the user, no label moves it)."""
    if target not in ("match_best", "cost_fraction", "budget"):
        raise ValueError(f"unknown target {target!r}; use 'match_best', 'cost_fraction' or 'budget'")
    d = cd.data
    j = best_single_column(d.correct[train], d.cost[train])
    best_acc, best_cost = float(d.correct[train, j].mean()), float(d.cost[train, j].mean())
    if target == "budget":
        return best_acc, float(cost_fraction)
    return best_acc, (cost_fraction * best_cost if target == "cost_fraction" else None)


def default_menu(cd: CascadeData, rows: np.ndarray | None = None) -> list[Spec]:
    """Every single model and agreement; with the resolve-rule variants when `cd` knows the kinds of disagreement.
    A pool of more than MENU_MODELS models builds its agreements from the MENU_MODELS that `screen_models` picks
    on `rows` (default every row; pass the training rows when the menu is scored held out)."""
    m = len(cd.data.models)
    rules = RULE_TOLERANCES if cd.kinds is not None else ()
    if m <= MENU_MODELS:
        return menu_of(m, rules=rules)
    rows = np.arange(len(cd.data.example_ids)) if rows is None else np.asarray(rows)
    return menu_of(m, rules=rules, among=screen_models(cd, rows))


def screen_models(cd: CascadeData, rows: np.ndarray, k: int = MENU_MODELS, slack: float = SCREEN_SLACK) -> list[int]:
    """The k columns a large pool's agreements are built from, chosen on `rows`: every single model and every
    agree(a, b → e) without tie-breaker or rules (m²(m−1)/2 strategies, cheap to run) are simulated, and the
    models that take part most often in the strategies within `slack` accuracy of that menu's cost–accuracy
    frontier are kept (ties: the cheaper model), the rest filled by accuracy. The full menu over m models grows as
    m⁴ (15 models: 62,000 strategies, a 6 GB simulation per fold); over k it is the size of an 8-model pool's."""
    m = len(cd.data.models)
    if m <= k:
        return list(range(m))
    sub = cd.subset(np.asarray(rows))
    specs = menu_of(m, tie_breakers=False)
    sim = simulate(sub, specs, sub.data.cost.mean(axis=0))
    counts = np.zeros(m)
    for j in pareto_menu(sim, np.arange(len(rows)), slack=slack):
        for col in set(specs[j][:2]) | {specs[j][3]}:
            counts[col] += 1
    acc, cost = sub.data.correct.mean(axis=0), sub.data.cost.mean(axis=0)
    order = np.lexsort((-acc, cost, -counts))  # most frontier strategies first, then cheaper, then more accurate
    return sorted(int(j) for j in order[:k])


# ("match_best" | "cost_fraction" | "budget", the cost fraction for "cost_fraction", USD per query for "budget")
Target = tuple[str, float]


C_GRID = (0.0, 0.03, 0.3)  # the regressions' inverse regularisation; 0: no regression (one strategy for all)
# A larger c must beat a smaller one by this many standard errors (paired, cross-fitted rows). 0: the plain
# inner-fold argmax, ties to the simpler. 2 was measured too (docs/metrics.md): better on the default pool,
# worse on the mixed one (c = 0 cannot mix two strategies to spend a budget), worse summed over the three pools.
NOISE_SE = 0.0


def fit_policies(cd: CascadeData, probs: np.ndarray, rows: np.ndarray, sim: Simulated, specs: list[Spec],
                 targets: list[Target], *, inner_folds: int = 5, menu_limit: int = MENU_LIMIT, slack: float = 0.0,
                 c_grid: tuple[float, ...] = C_GRID, seed: int = 0) -> tuple[list[StrategyPolicy], list[int]]:
    """Policies fitted on `rows` alone, one per target: their frontier as the menu (plus, per target, the
    single best strategy on `rows`), the same regressions, and per target the regularisation `c` and λ
    that do best on cross-fitted (inner-fold) estimates. Where the router's logits carry no signal about
    which strategy succeeds, `c` = 0 wins and the policy is the best fixed strategy."""
    models = cd.data.models
    menu = pareto_menu(sim, rows, limit=menu_limit, slack=slack)
    for target, fraction in targets:
        j = best_fixed_column(cd, sim, rows, target, fraction)
        if j not in menu:
            menu.append(j)
    strategies = [to_strategy(specs[j], models, sim.rules.get(j)) for j in menu]
    ok, paid = sim.correct[np.ix_(rows, menu)], sim.cost[np.ix_(rows, menu)]
    splits = list(KFold(min(inner_folds, len(rows)), shuffle=True, random_state=seed).split(rows))
    costs, idx = paid.mean(axis=0), np.arange(len(rows))
    points: dict[float, list[tuple[float, float, float]]] = {}
    inner_success: dict[float, np.ndarray] = {}
    for c in c_grid:
        inner = np.zeros((len(rows), len(menu)))
        for fit_rows, pred_rows in splits:
            pol = StrategyPolicy.fit(models, strategies, probs[rows[fit_rows]], ok[fit_rows], paid[fit_rows], c=c)
            inner[pred_rows] = pol.success(probs[rows[pred_rows]])
        inner_success[c] = inner
        points[c] = []
        for lam in lambda_grid(costs):
            pick = np.argmax(lam * inner - costs[None, :], axis=1)
            points[c].append((float(lam), float(ok[idx, pick].mean()), float(paid[idx, pick].mean())))
    out = []
    for target, fraction in targets:
        best_acc, budget = target_budget(cd, rows, target, fraction)
        lams = {c: _pick_lambda(pts, target=target, best_acc=best_acc, budget=budget) for c, pts in points.items()}
        per_row = {}
        for c, lam in lams.items():
            pick = np.argmax(lam * inner_success[c] - costs[None, :], axis=1)
            per_row[c] = (ok[idx, pick].astype(float), paid[idx, pick])
        c = _simplest_within_noise(per_row, target, best_acc, budget)
        out.append(replace(StrategyPolicy.fit(models, strategies, probs[rows], ok, paid, c=c), lam=lams[c]))
    return out, menu


def _simplest_within_noise(per_row: dict[float, tuple[np.ndarray, np.ndarray]], target: str, best_acc: float,
                           budget: float | None, noise_se: float = NOISE_SE) -> float:
    """A standard-error rule over the regularisation grid: the best `c` by the target on the cross-fitted rows,
    or the simplest (smallest) `c` whose shortfall from it is within `noise_se` standard errors of their paired
    per-row difference (a gain that is not about significant does not buy per-request choices)."""
    def point(c):
        return (c, float(per_row[c][0].mean()), float(per_row[c][1].mean()))

    best = min(per_row, key=lambda c: _target_key(point(c), target, best_acc, budget))
    _, b_acc, b_cost = point(best)
    for c in sorted(per_row):
        if c == best:
            return c
        _, acc, cost = point(c)
        n = len(per_row[c][0])
        d_ok, d_paid = per_row[best][0] - per_row[c][0], per_row[c][1] - per_row[best][1]
        se_ok, se_paid = noise_se * d_ok.std(ddof=1) / np.sqrt(n), noise_se * d_paid.std(ddof=1) / np.sqrt(n)
        if target == "match_best" and b_acc >= best_acc:
            if acc >= best_acc - se_ok and cost - b_cost <= se_paid:
                return c
        elif target == "match_best":
            if b_acc - acc <= se_ok:
                return c
        elif cost <= budget + se_paid and b_acc - acc <= se_ok:
            return c
    return best


def _target_key(point: tuple[float, float, float], target: str, best_acc: float, budget: float | None) -> tuple:
    """Order (λ, accuracy, cost) points by a target, the smallest key best: match_best, the cheapest point that
    reaches `best_acc` (else the most accurate); cost_fraction, the most accurate point within `budget` (else the
    cheapest)."""
    _, acc, cost = point
    if target == "match_best":
        return (0, cost, -acc) if acc >= best_acc else (1, -acc, cost)
    return (0, -acc, cost) if cost <= budget else (1, cost)


def best_fixed_column(cd: CascadeData, sim: Simulated, rows: np.ndarray, target: str, fraction: float) -> int:
    """The one spec best on `rows` for the target (the rule of `best_fixed_strategy`)."""
    acc, cost = sim.correct[rows].mean(axis=0), sim.cost[rows].mean(axis=0)
    best_acc, budget = target_budget(cd, rows, target, fraction)
    if target == "match_best":
        ok = np.flatnonzero(acc >= best_acc)
        return int(ok[np.argmin(cost[ok])]) if len(ok) else int(np.argmax(acc))
    ok = np.flatnonzero(cost <= budget)
    return int(ok[np.lexsort((cost[ok], -acc[ok]))[0]]) if len(ok) else int(np.argmin(cost))


def simulate_all_rows(cd: CascadeData, specs: list[Spec]) -> Simulated:
    """Every spec on every row, "cheaper" by the mean costs over all rows and resolve rules fitted on all rows:
    what the in-sample ceiling and the deployable policy both start from (pass it to each to simulate once)."""
    return simulate(cd, specs, cd.data.cost.mean(axis=0), fit_rows=np.arange(len(cd.data.example_ids)))


def deployable_policy(cd: CascadeData, probs: np.ndarray, *, target: str = "cost_fraction", cost_fraction: float = 0.2,
                      specs: list[Spec] | None = None, sim: Simulated | None = None, **fit_kw) -> StrategyPolicy:
    """The policy to serve: menu, regressions and λ fitted on every held-out row (λ cross-fitted). `specs` and
    `sim`: the menu and its `simulate_all_rows`, when the caller has them already."""
    specs = specs or default_menu(cd)
    sim = sim or simulate_all_rows(cd, specs)
    return fit_policies(cd, probs, np.arange(len(probs)), sim, specs, [(target, cost_fraction)], **fit_kw)[0][0]


def write_strategy_policy(router_dir: str | Path, cd: CascadeData, probs: np.ndarray, *, cost_fraction: float = 0.2,
                          budget_usd_per_million: float | None = None, specs: list[Spec] | None = None,
                          sim: Simulated | None = None) -> Path:
    """The deployable policy into `<router_dir>/router.json` (`strategy_policy`): `switchcraft export` and the
    Triton repository carry it to serving, where RouterClient runs it. Its cost target: `cost_fraction` of the
    best single model's cost (read off `cd`'s labels), or with `budget_usd_per_million` that budget in USD per
    million requests (what to give where the labels are consensus labels: no label can move it)."""
    if budget_usd_per_million is not None and not budget_usd_per_million > 0:
        raise ValueError(f"budget_usd_per_million must be > 0, got {budget_usd_per_million}")
    target, value = (("budget", budget_usd_per_million / 1e6) if budget_usd_per_million is not None
                     else ("cost_fraction", cost_fraction))
    policy = deployable_policy(cd, probs, target=target, cost_fraction=value, specs=specs, sim=sim)
    path = Path(router_dir) / "router.json"
    info = json.loads(path.read_text())
    if list(info.get("models") or []) != cd.data.models:
        raise ValueError(f"{path}: the router is over {info.get('models')}, the evaluation over {cd.data.models}")
    label = (f"budget {budget_usd_per_million:g} USD per million requests" if budget_usd_per_million is not None
             else f"cost_fraction {cost_fraction}")
    info["strategy_policy"] = {**policy.to_json(), "target": label,
                               "fitted_on": f"{len(probs)} labelled queries (out-of-fold router probabilities)"}
    path.write_text(json.dumps(info, indent=2, default=str))
    return path
