"""Without ground truth: everything fitted on consensus labels, every row scored with the true labels.

    switchcraft reproduce --labels consensus        # report section "Without ground truth"

    from evaluation.offline.consensus_eval import consensus_fit_rows
    rows = consensus_fit_rows(cd, fit_correct, probs)       # cd: CascadeData with the TRUE labels

For test fold k, everything that chooses from labels (the strategy menu, the resolve rules, the success
regressions, λ, the best single model whose accuracy "best-single accuracy" means) sees the training folds'
*consensus* labels (`fit_correct`, from `data.consensus`), and the router probabilities come from a router
trained on consensus labels only; the rows of fold k are then scored with the verifier's labels. Implemented by
running the usual held-out code once per fold on a matrix that holds consensus labels on the training folds and
true labels on fold k: that code fits on training rows only, so nothing true reaches the fit.

The cost targets ("≤ 20% / 10% of best-single cost") are *given budgets*: the same USD per query as the
truth-fit rows' on the same training folds (a user states a budget in money; prices and token counts need no
label). One diagnostic row instead reads the budget's anchor — the best single model — off the consensus labels,
as a user without labels who asks for "20% of the best model" would: where consensus swaps two near-tied top
models, that budget moves by their price ratio (docs/consensus.md).

The consensus-fit menu has no agreement cascade between two models that share most of their errors
(`menu_apart`): consensus labels cannot see an error such a pair makes together, so their agreement would look
like a check it is not (several deployments of one model in a pool; docs/consensus.md).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from evaluation.offline.routing_eval import evaluate_router, profiled_costs
from evaluation.offline.stats import paired_bootstrap
from evaluation.offline.strategy_eval import RowOutcome, _fold_split, _row_of_specs, row_of_choice
from training.policy.fit import best_fixed_column, default_menu, fit_policies, target_budget
from training.policy.simulate import CascadeData, simulate

# (target, cost fraction, row name): the strategy rows the section compares, as in the headline.
TARGETS = (("match_best", 0.2, "best-single accuracy"), ("cost_fraction", 0.2, "≤ 20% of best-single cost"),
           ("cost_fraction", 0.1, "≤ 10% of best-single cost"))
# Two models whose answers agree on at least this share of each one's (consensus-labelled) errors: no agreement
# cascade between them on the consensus-fit menu. Set once ("most of their errors"), not tuned.
SHARED_ERRORS = 0.5
# The diagnostic row: ≤ 20% of the cost of the model the consensus labels rank first (the anchor read off them).
ANCHORED = "≤ 20% of the consensus-ranked best single's cost (diagnostic)"


def menu_apart(cd: CascadeData, fit_correct: np.ndarray, shared: float = SHARED_ERRORS,
               rows: np.ndarray | None = None) -> list:
    """The strategy menu (`default_menu` on `rows` of `cd`) without agreement cascades between two models that
    share most of their errors by the consensus labels (`data.consensus.error_sharing_pairs`, over every query's
    answers, as the labels themselves are): consensus cannot see an error such a pair makes together, so it
    would overrate their agreement."""
    from data.consensus import error_sharing_pairs

    pairs = error_sharing_pairs(cd.agree, fit_correct, shared=shared)
    return [s for s in default_menu(cd, rows) if s[0] == s[1] or not pairs[s[0], s[1]]]


def given_budget(cd: CascadeData, k: int, fraction: float) -> float:
    """USD per query: `fraction` × the best single model's mean cost on fold k's training rows, by `cd`'s (true)
    labels — the budget the truth-fit row has, given to the consensus-fit row as a number."""
    return float(target_budget(cd, _fold_split(cd, k)[0], "cost_fraction", fraction)[1])


def hybrid(cd: CascadeData, fit_correct: np.ndarray, k: int) -> CascadeData:
    """`cd` with consensus labels on every row but fold k's (whose true labels score the fold)."""
    test = cd.data.folds == k
    correct = np.where(test[:, None], cd.data.correct, fit_correct)
    return replace(cd, data=replace(cd.data, correct=correct))


def consensus_fit_rows(cd: CascadeData, fit_correct: np.ndarray, probs: np.ndarray, *,
                       prefix: str = "switchcraft strategies") -> dict[str, RowOutcome]:
    """The strategy policy at each of TARGETS, the best fixed strategy (≤ 20%), and the router's λ rule, all fitted
    on consensus labels per fold and scored with the true labels of the held-out fold."""
    if fit_correct.shape != cd.data.correct.shape or probs.shape != cd.data.correct.shape:
        raise ValueError(f"consensus labels {fit_correct.shape} and probabilities {probs.shape} must match the "
                         f"true labels {cd.data.correct.shape}")
    n = len(probs)
    # Per fold: the targets with each cost fraction turned into the truth-fit row's budget, then the diagnostic.
    n_t = len(TARGETS) + 1
    picks = np.zeros((n_t + 1, n), dtype=int)
    params: list[dict[int, float]] = [{} for _ in range(n_t)]
    sims = {}
    lam_choice = {t: np.zeros(n, dtype=int) for t in ("match_best", "cost_fraction")}
    lam_params = {t: {} for t in lam_choice}
    for k in cd.data.fold_ids:
        cdk = hybrid(cd, fit_correct, k)
        train, test = _fold_split(cdk, k)
        budget = {f: given_budget(cd, k, f) for f in (0.1, 0.2)}
        targets = [("budget", budget[f]) if t == "cost_fraction" else (t, f) for t, f, _ in TARGETS]
        targets.append(("cost_fraction", 0.2))  # the diagnostic: the anchor read off the fit labels
        specs = menu_apart(cdk, fit_correct, rows=train)  # a large pool's screen on the consensus-labelled rows
        sims[k] = simulate(cdk, specs, profiled_costs(cdk.data, train), fit_rows=train)
        policies, menu = fit_policies(cdk, probs, train, sims[k], specs, targets)
        for i, policy in enumerate(policies):
            picks[i, test] = np.asarray(menu)[policy.choose(probs[test])]
            params[i][k] = policy.lam
        picks[-1, test] = best_fixed_column(cdk, sims[k], train, "budget", budget[0.2])
        for t in lam_choice:
            kw = ({"target": "budget", "budget_per_million": budget[0.1] * 1e6} if t == "cost_fraction"
                  else {"target": t})
            r = evaluate_router("router", probs, cdk.data, rule="lambda", **kw)
            lam_choice[t][test] = r.choice[test]
            lam_params[t][k] = r.taus[k]
    # Scoring: sims[k] holds fold k's true labels on fold k's rows (the only rows read from it).
    names = [f"{prefix}, λ for {what}" for _, _, what in TARGETS] + [f"{prefix}, λ for {ANCHORED}"]
    out = {name: _row_of_specs("", picks[i], sims, cd, params[i]) for i, name in enumerate(names)}
    out["best fixed strategy on training folds, for ≤ 20% of best-single cost"] = _row_of_specs(
        "", picks[-1], sims, cd, {})
    for t, what in (("match_best", "best-single accuracy"), ("cost_fraction", "≤ 10% of best-single cost")):
        out[f"switchcraft router, λ rule, λ for {what}"] = row_of_choice("", lam_choice[t], cd, lam_params[t])
    for name, r in out.items():
        r.name = name
    return out


def side_by_side(consensus: dict[str, RowOutcome], truth: dict[str, RowOutcome], best_single: RowOutcome
                 ) -> list[dict]:
    """Per row: the consensus-fit and the truth-fit outcome (true labels), and the paired differences with
    95% bootstrap intervals (same resampled queries)."""
    out = []
    for name, c in consensus.items():
        t = truth.get(name)
        if t is None:
            continue
        ci = paired_bootstrap({"truth": (t.correct, t.cost), "consensus": (c.correct, c.cost),
                               "best": (best_single.correct, best_single.cost)}, reference="truth")
        best_cost = float(best_single.cost.mean())
        out.append({
            "routing": name,
            "consensus_fit_accuracy": float(c.correct.mean()),
            "consensus_fit_accuracy_ci": [ci["consensus"].accuracy.low, ci["consensus"].accuracy.high],
            "consensus_fit_usd_per_million": float(c.cost.mean() * 1e6),
            "consensus_fit_usd_per_million_ci": [ci["consensus"].usd_per_million.low, ci["consensus"].usd_per_million.high],
            "consensus_fit_cost_share_of_best_single": float(c.cost.mean() / best_cost),
            "truth_fit_accuracy": float(t.correct.mean()),
            "truth_fit_accuracy_ci": [ci["truth"].accuracy.low, ci["truth"].accuracy.high],
            "truth_fit_usd_per_million": float(t.cost.mean() * 1e6),
            "truth_fit_cost_share_of_best_single": float(t.cost.mean() / best_cost),
            "delta_accuracy": float(c.correct.mean() - t.correct.mean()),
            "delta_accuracy_ci": [ci["consensus"].delta_accuracy.low, ci["consensus"].delta_accuracy.high],
            "delta_usd_per_million": float((c.cost.mean() - t.cost.mean()) * 1e6),
            "delta_usd_per_million_ci": [ci["consensus"].delta_usd_per_million.low,
                                         ci["consensus"].delta_usd_per_million.high],
        })
    return out
