"""Every routing row of a run on the held-out folds: the router, the learned baselines, the category prior and
the strategy rows.

    from evaluation.report.evaluate import run_evaluation
    ev = run_evaluation(labels, examples, oof, models, outputs=outputs, pool=pool)   # an Evaluation

The router and each baseline at a τ calibrated for best-single accuracy and for ≤ 10% of its cost, at τ = 0.5,
and with the λ rule; the category prior (BFCL's category known: the bar, not servable) with the λ rule; with the
recorded outputs, the strategy policy and the best fixed strategy at each target. Row names (`ROUTER`,
`STRATEGIES`, `PRIOR`) are the headline's. Everything chosen from labels is chosen on the training folds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from data.schema import Example, Label
from evaluation.offline.baselines import BASELINES, request_text
from evaluation.offline.curves import bootstrap_curves, read_at_cost
from evaluation.offline.routing_eval import (
    References,
    RouterResult,
    RoutingData,
    curve_scores,
    evaluate_router,
    oof_matrix,
    references,
)
from evaluation.offline.stats import paired_bootstrap
from evaluation.offline.strategy_eval import (
    Ceiling,
    RowOutcome,
    best_fixed_strategy,
    default_menu,
    evaluate_strategy_policies,
    fixed_ceilings,
    fold_simulations,
    simulate_all_rows,
)
from training.policy.simulate import CascadeData

ROUTER = "switchcraft router"


STRATEGIES = "switchcraft strategies"


PRIOR = "category prior (reference: BFCL category known)"


# The strategy rows' targets: (target, cost fraction, what the row name says).
STRATEGY_TARGETS = (("match_best", None, "best-single accuracy"), ("cost_fraction", 0.2, "≤ 20% of best-single cost"),
                    ("cost_fraction", 0.1, "≤ 10% of best-single cost"))
# The most accurate policy at no more than the best single model's cost: fitted on its own (its best fixed
# strategy joins only its menu), so the rows above are the same with or without it.
MOST_ACCURATE = ("cost_fraction", 1.0, "≤ 100% of best-single cost")


@dataclass
class Evaluation:
    data: RoutingData
    refs: References
    routers: dict[str, RouterResult]  # router and learned baselines, each at its calibrated τ
    frugal: dict[str, RouterResult]  # the same, τ calibrated for ≤ 10% of the best single model's cost
    fixed: dict[str, RouterResult]  # the router at the default τ = 0.5
    scores: dict[str, dict[str, float]]
    # The λ rule (argmax λ·p − cost, serving.policy rule="lambda"), λ calibrated for each target.
    lambda_rule: dict[str, dict[str, RouterResult]] = field(default_factory=dict)  # target → name → result
    cascade: CascadeData | None = None  # agreement and latency: strategy rows and latency columns need it
    strategies: dict[str, RowOutcome] = field(default_factory=dict)  # headline name → held-out outcome
    references_extra: dict[str, dict[str, RouterResult]] = field(default_factory=dict)  # e.g. the category prior
    ceilings: list[Ceiling] = field(default_factory=list)  # in-sample: can any one strategy meet the cost targets?
    all_rows: dict = field(default_factory=dict)  # {"specs", "sim"}: the menu on every row (ceilings, deployable policy)
    probs: dict[str, np.ndarray] = field(default_factory=dict)  # held-out P(correct): the router's and the prior's


def run_evaluation(
    labels: list[Label],
    examples: dict[str, Example],
    oof: pd.DataFrame,
    models: list[str],
    *,
    embeddings: dict[str, np.ndarray] | None = None,
    target: str = "match_best",
    budget_per_million: float | None = None,
    outputs: list | None = None,
    pool=None,
    progress: bool = False,
) -> Evaluation:
    """Every routing row on the held-out folds. With `outputs` (the recorded outputs the labels were made
    from) and `pool`, also the strategy rows (agreement cascades) and recorded latencies."""
    folds = oof.drop_duplicates("example_id").set_index("example_id")["fold"].astype(int).to_dict()
    folds = {e: f for e, f in folds.items() if f >= 0}
    data = RoutingData.from_labels(labels, examples, models, folds)
    probs, _ = oof_matrix(oof, data.example_ids, models)
    if np.isnan(probs).any():
        raise ValueError(f"{int(np.isnan(probs).any(axis=1).sum())} held-out rows have no router probability")
    refs = references(data)
    kw = dict(target=target, budget_per_million=budget_per_million)
    learned = {ROUTER: probs}
    texts = [request_text(examples[e]) for e in data.example_ids]
    learned["TF-IDF + LR"] = BASELINES.get("tfidf_lr")().oof_probabilities(texts=texts, correct=data.correct, folds=data.folds)
    if embeddings is not None:
        emb = np.stack([embeddings[e] for e in data.example_ids])
        learned["kNN (encoder)"] = BASELINES.get("knn")().oof_probabilities(embeddings=emb, correct=data.correct, folds=data.folds)
    routers = {name: evaluate_router(name, p, data, **kw) for name, p in learned.items()}
    frugal = {name: evaluate_router(name, p, data, target="cost_fraction") for name, p in learned.items()}
    fixed = {ROUTER: evaluate_router(ROUTER, probs, data, fixed_tau=0.5)}
    scores = {name: curve_scores(r, refs, data) for name, r in routers.items()}
    lam = {t: {name: evaluate_router(name, p, data, **{**kw, "target": t}, rule="lambda") for name, p in learned.items()
               if name != "kNN (encoder)"}
           for t in (target, "cost_fraction")}
    ev = Evaluation(data, refs, routers, frugal, fixed, scores, lam)
    from evaluation.offline.category_prior import category_prior_probs

    prior = category_prior_probs(data.categories, data.correct, data.folds)
    ev.references_extra[PRIOR] = {
        t: evaluate_router("category prior", prior, data, **{**kw, "target": t}, rule="lambda") for t in (target, "cost_fraction")}
    ev.probs = {ROUTER: probs, PRIOR: prior}
    if outputs is not None and pool is not None:
        ev.cascade = CascadeData.from_outputs(outputs, examples, pool, data, progress=progress)
        ev.strategies = strategy_rows(ev.cascade, probs)
        specs = default_menu(ev.cascade)
        ev.all_rows = {"specs": specs, "sim": simulate_all_rows(ev.cascade, specs)}
        ev.ceilings = fixed_ceilings(ev.cascade, tuple(f for t, f, _ in STRATEGY_TARGETS if t == "cost_fraction"),
                                     **ev.all_rows)
    return ev


def strategy_rows(cd: CascadeData, probs: np.ndarray) -> dict[str, RowOutcome]:
    """The strategy policy at each target, and the best fixed strategy (chosen on training folds) beside it."""
    sims = fold_simulations(cd)  # each fold's menu chosen on its training rows
    out = evaluate_strategy_policies(cd, probs, [(t, f or 0.2) for t, f, _ in STRATEGY_TARGETS],
                                     [f"{STRATEGIES}, λ for {what}" for _, _, what in STRATEGY_TARGETS], sims=sims)
    t, f, what = MOST_ACCURATE
    out |= evaluate_strategy_policies(cd, probs, [(t, f)], [f"{STRATEGIES}, λ for {what}"], sims=sims)
    for target, fraction, what in STRATEGY_TARGETS[:2]:
        out[f"best fixed strategy on training folds, for {what}"] = best_fixed_strategy(
            cd, target=target, cost_fraction=fraction or 0.2, sims=sims)
    return out


def deployable_parameters(data: RoutingData, probs: np.ndarray) -> dict[str, dict[str, float]]:
    """τ and λ for serving, calibrated on every held-out row (costs profiled on all of them).

    The report's numbers calibrate on other folds; a deployment has no test fold,
    so these use everything. Set them in configs/serving.yaml (`router.rule`,
    `router.lam`) or per request (`router-<τ>`).
    """
    from evaluation.offline.routing_eval import choose_tau

    costs = data.cost.mean(axis=0)
    out: dict[str, dict[str, float]] = {}
    for target in ("match_best", "cost_fraction"):
        out[target] = {rule: choose_tau(probs, data.correct, data.cost, costs, target=target, rule=rule)
                       for rule in ("tau", "lambda")}
    return out


def target_text(t: str) -> str:
    return "≤ 10% of best-single cost" if t == "cost_fraction" else ("best-single accuracy" if t == "match_best" else t)


def policy_vs_fixed(ev: Evaluation) -> dict[str, dict[str, list[float]]]:
    """Per target with both rows: the strategy policy − the best fixed strategy, paired on the same held-out
    queries (95% intervals of the accuracy and $/M differences): does choosing per request pay on this pool?"""
    out = {}
    for _, _, what in STRATEGY_TARGETS:
        policy, fixed = ev.strategies.get(f"{STRATEGIES}, λ for {what}"), ev.strategies.get(
            f"best fixed strategy on training folds, for {what}")
        if policy is None or fixed is None:
            continue
        ci = paired_bootstrap({"policy": (policy.correct, policy.cost), "fixed": (fixed.correct, fixed.cost)},
                              reference="fixed")["policy"]
        out[what] = {"delta_accuracy": [float((policy.correct.mean() - fixed.correct.mean())), ci.delta_accuracy.low,
                                        ci.delta_accuracy.high],
                     "delta_usd_per_million": [float((policy.cost.mean() - fixed.cost.mean()) * 1e6),
                                               ci.delta_usd_per_million.low, ci.delta_usd_per_million.high]}
    return out


def router_vs_prior(ev: Evaluation, *, resamples: int = 1000, seed: int = 0) -> list[dict]:
    """Per λ target: the router's λ row against the category prior's, paired on the same held-out queries
    ("reached": `RowIntervals.reaches`, accuracy not significantly below, cost not significantly above), and
    the router's held-out λ curve read at the prior's cost against the prior's own curve there
    (`evaluation.offline.curves`, `resamples` paired resamples: how well the router ranks, apart from where the λ
    rule lands). Empty without the router's and the prior's probabilities."""
    prior_rows, lam = ev.references_extra.get(PRIOR, {}), ev.lambda_rule
    if ROUTER not in ev.probs or PRIOR not in ev.probs or not prior_rows:
        return []
    n = len(ev.data.example_ids)
    rows, idx = np.arange(n), np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    curves = bootstrap_curves({name: ev.probs[name] for name in (ROUTER, PRIOR)}, ev.data, idx)
    out = []
    for t, prior_r in prior_rows.items():
        router_r = lam.get(t, {}).get(ROUTER)
        if router_r is None:
            continue
        per = {name: (ev.data.correct[rows, r.choice], ev.data.cost[rows, r.choice])
               for name, r in ((ROUTER, router_r), (PRIOR, prior_r))}
        ci = paired_bootstrap(per, reference=PRIOR)[ROUTER]
        (acc, usd), (p_acc, p_usd) = ((c.mean(), d.mean() * 1e6) for c, d in (per[ROUTER], per[PRIOR]))
        v, ref, lo, hi = read_at_cost(curves, PRIOR, per[PRIOR][1], idx)[ROUTER]
        out.append({"target": target_text(t), "router": [float(acc), float(usd)], "prior": [float(p_acc), float(p_usd)],
                    "delta_accuracy": [float(acc - p_acc), ci.delta_accuracy.low, ci.delta_accuracy.high],
                    "delta_usd_per_million": [float(usd - p_usd), ci.delta_usd_per_million.low,
                                              ci.delta_usd_per_million.high],
                    "reached": ci.reaches,
                    "curve_at_prior_cost": {"router": v, "prior": ref, "delta": [v - ref, lo, hi], "not_below": bool(hi >= 0)}})
    return out
