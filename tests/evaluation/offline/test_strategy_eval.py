"""Held-out scoring of strategy routing (evaluation.offline.strategy_eval): the policy fitted on training folds
only, the best fixed strategy, the in-sample ceiling, the bootstrap, the report's pairing.

    .venv/bin/python -m pytest -q tests/evaluation/offline/test_strategy_eval.py
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.offline.stats import paired_bootstrap
from evaluation.offline.strategy_eval import best_fixed_strategy, evaluate_strategy_policy, fixed_ceilings, fold_simulations
from tests.training.policy.helpers import COSTS, cascade_data, synthetic
from training.policy.simulate import menu_of, simulate

def test_policy_beats_the_strong_model_at_a_fraction_of_its_cost_on_synthetic_data():
    cd, probs = synthetic()
    specs = menu_of(3)
    sims = fold_simulations(cd, specs)
    res = evaluate_strategy_policy(cd, probs, target="cost_fraction", cost_fraction=0.5, specs=specs, sims=sims)
    strong = cd.data.correct[:, 2].mean()
    assert res.outcome.accuracy >= strong - 0.02
    assert res.outcome.mean_cost_usd <= 0.5 * 10.0
    assert set(res.params) == {0, 1, 2, 3, 4}
    assert sum(res.chosen.values()) == len(probs)
    fixed = best_fixed_strategy(cd, target="cost_fraction", cost_fraction=0.5, specs=specs, sims=sims)
    assert fixed.outcome.mean_cost_usd <= 0.5 * 10.0 + 1e-9


def test_the_in_sample_ceiling_is_the_best_strategy_and_the_best_mix_of_two_within_each_budget():
    cd, _ = synthetic()
    specs = menu_of(3)
    tight, loose = fixed_ceilings(cd, (0.1, 0.7), specs=specs)
    sim = simulate(cd, specs, COSTS)
    acc, cost = sim.correct.mean(axis=0), sim.cost.mean(axis=0)
    strong_acc = cd.data.correct[:, 2].mean()
    assert loose.accuracy == pytest.approx(acc[cost <= 0.7 * 10.0].max())
    assert loose.usd_per_million <= 0.7 * 10.0 * 1e6 and loose.strategy.startswith("agree(")
    # The mix, by brute force over every pair of strategies on either side of the budget.
    budget = 0.7 * 10.0
    mixes = [acc[i] + (budget - cost[i]) / (cost[j] - cost[i]) * (acc[j] - acc[i])
             for i in np.flatnonzero(cost <= budget) for j in np.flatnonzero(cost > budget)]
    assert loose.mix_accuracy == pytest.approx(max(loose.accuracy, max(mixes)))
    assert loose.best_single_accuracy == pytest.approx(strong_acc) and loose.best_single_usd_per_million == 10.0 * 1e6
    assert loose.reaches_best_single == (loose.mix_accuracy >= strong_acc)
    # At 10% of the strong model's cost only cheap_a alone fits, and no mix reaches the strong model.
    assert tight.strategy == "single(cheap_a)" and not tight.reaches_best_single
    assert tight.accuracy <= tight.mix_accuracy < strong_acc
    # A budget nothing fits says so instead of naming the cheapest strategy.
    none = fixed_ceilings(cd, (0.05,), specs=specs)[0]
    assert none.strategy == "" and np.isnan(none.accuracy) and not none.reaches_best_single


def _with_kinds(cd, seed=0):
    """The synthetic data with kinds of disagreement: half the disagreements are "first_declines", where the
    cheapest model (a) is right 97% of the time (a rule "answer with a" pays), the rest "arguments"."""
    from data.verify.agree import DISAGREEMENT_KINDS

    rng = np.random.default_rng(seed)
    n = len(cd.data.example_ids)
    cd.kinds = np.zeros((n, 3, 3), np.int8)
    split = ~cd.agree[:, 0, 1]
    declines = split & (rng.random(n) < 0.5)
    cd.kinds[declines, 0, 1] = DISAGREEMENT_KINDS.index("first_declines") + 1
    cd.kinds[declines, 1, 0] = DISAGREEMENT_KINDS.index("second_declines") + 1
    cd.kinds[split & ~declines, 0, 1] = cd.kinds[split & ~declines, 1, 0] = DISAGREEMENT_KINDS.index("arguments") + 1
    cd.data.correct[declines, 0] = rng.random(int(declines.sum())) < 0.97
    return cd, declines


def test_held_out_labels_never_choose_the_parameters():
    """In every fold, the resolve rules, λ and the strategies run on the test rows come from the other folds:
    making the cheap model wrong on the test fold's "first_declines" rows (where a rule answers with it) moves
    none of them, though the same change on all rows would drop the rule."""
    from evaluation.offline.strategy_eval import _fold_split
    from training.policy.fit import default_menu, fit_policies

    cd, probs = synthetic(n=400)
    cd, declines = _with_kinds(cd)
    specs = default_menu(cd)
    assert any(len(s) == 5 for s in specs)  # the rule variants are on the menu
    sims = fold_simulations(cd, specs)
    fit = dict(inner_folds=3, c_grid=(0.0, 0.3))
    for k in cd.data.fold_ids:
        assert {"first_declines": "first"} in sims[k].rules.values()
        train, test = _fold_split(cd, k)
        flipped = cascade_data(cd.data.correct.copy(), agree_ab=cd.agree[:, 0, 1].copy(), folds=cd.data.folds)
        flipped.kinds = cd.kinds
        flipped.data.correct[test[declines[test]], 0] = False
        other_sims = fold_simulations(flipped, specs)
        assert other_sims[k].rules == sims[k].rules
        (base,), menu = fit_policies(cd, probs, train, sims[k], specs, [("cost_fraction", 0.5)], **fit)
        (other,), other_menu = fit_policies(flipped, probs, train, other_sims[k], specs, [("cost_fraction", 0.5)], **fit)
        assert other_menu == menu and other.lam == base.lam and other.c == base.c
        assert other.choose(probs[test]).tolist() == base.choose(probs[test]).tolist()
    # The same change on every row does move the rules: the check above can see a leak.
    every = cascade_data(cd.data.correct.copy(), agree_ab=cd.agree[:, 0, 1].copy(), folds=cd.data.folds)
    every.kinds = cd.kinds
    every.data.correct[declines, 0] = False
    assert {"first_declines": "first"} not in fold_simulations(every, specs)[0].rules.values()


def test_paired_bootstrap_intervals_and_significance():
    rng = np.random.default_rng(1)
    ref = rng.random(500) < 0.8
    same = ref.copy()
    better = ref | (rng.random(500) < 0.5)
    cost = np.full(500, 2e-3)
    ci = paired_bootstrap({"ref": (ref, cost), "same": (same, cost), "better": (better, cost / 4)}, reference="ref")
    assert ci["same"].delta_accuracy.low == ci["same"].delta_accuracy.high == 0
    assert not ci["same"].significant_accuracy
    assert ci["better"].significant_accuracy and ci["better"].significant_cost
    assert ci["better"].verdict() == "more accurate, cheaper"
    assert ci["ref"].accuracy.low < ref.mean() < ci["ref"].accuracy.high
    with pytest.raises(ValueError, match="same 500 queries"):
        paired_bootstrap({"ref": (ref, cost), "short": (ref[:10], cost[:10])}, reference="ref")
    with pytest.raises(ValueError, match="reference row"):
        paired_bootstrap({"ref": (ref, cost)}, reference="missing")


def test_the_report_pairs_the_policy_with_the_best_fixed_strategy_on_the_same_queries():
    from types import SimpleNamespace

    from evaluation.report.evaluate import STRATEGIES, policy_vs_fixed
    from evaluation.offline.strategy_eval import RowOutcome

    rng = np.random.default_rng(0)
    fixed_ok = rng.random(400) < 0.8
    policy_ok = fixed_ok | (rng.random(400) < 0.3)  # right wherever fixed is, and more

    def row(ok, usd):
        return RowOutcome("r", ok, np.full(400, usd), np.zeros(400), np.ones(400, int), np.zeros(400, bool))

    what = "≤ 20% of best-single cost"
    ev = SimpleNamespace(strategies={f"{STRATEGIES}, λ for {what}": row(policy_ok, 2e-4),
                                     f"best fixed strategy on training folds, for {what}": row(fixed_ok, 3e-4)})
    out = policy_vs_fixed(ev)
    assert list(out) == [what]
    d_acc, lo, hi = out[what]["delta_accuracy"]
    assert d_acc == pytest.approx(policy_ok.mean() - fixed_ok.mean()) and 0 < lo <= d_acc <= hi
    assert out[what]["delta_usd_per_million"] == pytest.approx([-100.0, -100.0, -100.0])
