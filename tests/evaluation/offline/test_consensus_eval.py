"""The consensus-fit rows (evaluation.offline.consensus_eval): fitted on one set of labels, scored with the true ones.

    .venv/bin/python -m pytest -q tests/evaluation/offline/test_consensus_eval.py
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.offline.consensus_eval import consensus_fit_rows, hybrid, side_by_side
from evaluation.offline.routing_eval import RoutingData
from evaluation.offline.strategy_eval import evaluate_strategy_policies, fold_simulations
from training.policy.fit import default_menu
from training.policy.simulate import CascadeData


def cd_of(correct, cost, agree=None, folds=None) -> CascadeData:
    correct = np.asarray(correct, bool)
    n, m = correct.shape
    if agree is None:  # answers agree exactly when both are right
        agree = correct[:, :, None] & correct[:, None, :]
        agree[:, range(m), range(m)] = True
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), [f"m{j}" for j in range(m)], correct,
                       np.tile(np.asarray(cost, float), (n, 1)), np.arange(n) % 2 if folds is None else np.asarray(folds))
    return CascadeData(data, agree, np.ones((n, m)), {f"m{j}": n for j in range(m)})


def _synthetic(n=300, seed=0):
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.3
    correct = np.stack([rng.random(n) < np.where(hard, 0.5, 0.99), rng.random(n) < np.where(hard, 0.4, 0.98),
                        rng.random(n) < np.where(hard, 0.9, 0.99)], axis=1)
    cd = cd_of(correct, [1.0, 2.0, 10.0], folds=np.arange(n) % 3)
    probs = np.clip(np.stack([np.where(hard, 0.5, 0.95), np.where(hard, 0.4, 0.9), np.where(hard, 0.9, 0.97)], 1)
                    + rng.normal(0, 0.03, (n, 3)), 0.01, 0.99)
    return cd, probs


def test_consensus_fit_with_true_labels_is_the_truth_fit():
    cd, probs = _synthetic()
    rows = consensus_fit_rows(cd, cd.data.correct.copy(), probs, prefix="s")
    specs = default_menu(cd)
    truth = evaluate_strategy_policies(cd, probs, [("cost_fraction", 0.2)], ["s"], specs=specs,
                                       sims=fold_simulations(cd, specs))["s"]
    mine = rows["s, λ for ≤ 20% of best-single cost"]
    assert mine.correct.tolist() == truth.correct.tolist() and mine.cost.tolist() == truth.cost.tolist()
    table = side_by_side({"x": mine}, {"x": truth}, truth)
    assert table[0]["delta_accuracy"] == 0 and table[0]["delta_accuracy_ci"] == [0, 0]


def test_consensus_fit_rows_score_with_true_labels():
    cd, probs = _synthetic()
    k = 1
    fit = np.zeros_like(cd.data.correct)
    fit[:, 0] = True  # the fit labels: the cheapest model always right, the others never
    h = hybrid(cd, fit, k)
    test = cd.data.folds == k
    assert (h.data.correct[test] == cd.data.correct[test]).all() and (h.data.correct[~test] == fit[~test]).all()
    rows = consensus_fit_rows(cd, fit, probs, prefix="s")
    fixed = rows["best fixed strategy on training folds, for ≤ 20% of best-single cost"]
    assert set(fixed.chosen) == {"single(m0)"}  # chosen on the fit labels ...
    assert fixed.correct.tolist() == cd.data.correct[:, 0].tolist()  # ... scored with the true ones
    router = rows["switchcraft router, λ rule, λ for best-single accuracy"]
    assert set(router.chosen) == {"single(m0)"} and router.correct.tolist() == cd.data.correct[:, 0].tolist()
    with pytest.raises(ValueError, match="must match"):
        consensus_fit_rows(cd, fit[:10], probs)


def test_cost_targets_are_the_truth_fit_budgets_and_the_diagnostic_reads_the_anchor_off_the_fit_labels():
    # True labels: m2 (cost 10) is the best single, so ≤ 20% of its cost is 2.0 per query, which buys m1.
    # The fit labels rank m1 (cost 2) first: "20% of the best single" read off them is 0.4, which buys nothing
    # but the cheapest model. The given budget must not move with the labels; the diagnostic must.
    cd, probs = _synthetic()
    fit = np.zeros_like(cd.data.correct)
    fit[:, 1] = True
    rows = consensus_fit_rows(cd, fit, probs, prefix="s")
    fixed = rows["best fixed strategy on training folds, for ≤ 20% of best-single cost"]
    assert set(fixed.chosen) == {"single(m1)"}
    given = rows["s, λ for ≤ 20% of best-single cost"]
    assert given.cost.mean() == pytest.approx(2.0)
    anchored = rows["s, λ for ≤ 20% of the consensus-ranked best single's cost (diagnostic)"]
    assert set(anchored.chosen) == {"single(m0)"} and anchored.cost.mean() == pytest.approx(1.0)


def test_the_consensus_fit_menu_has_no_agreement_between_models_that_share_their_errors():
    from data.consensus import error_sharing_pairs
    from evaluation.offline.consensus_eval import menu_apart

    # m0 and m1 give the same wrong answer on every query the fit labels call wrong for them; m2 errs alone.
    n = 40
    correct = np.ones((n, 3), bool)
    correct[:10, [0, 1]] = False
    correct[10:20, 2] = False
    agree = correct[:, :, None] & correct[:, None, :]
    agree[:10, 0, 1] = agree[:10, 1, 0] = True  # the shared wrong answer
    agree[:, range(3), range(3)] = True
    cd = cd_of(correct, [1.0, 2.0, 10.0], agree=agree)
    pairs = error_sharing_pairs(agree, correct)
    assert pairs.tolist() == [[False, True, False], [True, False, False], [False, False, False]]
    menu = menu_apart(cd, correct)
    assert not any(s[0] != s[1] and {s[0], s[1]} == {0, 1} for s in menu)
    assert any(s[:2] == (0, 2) for s in menu) and (0, 0, None, 0) in menu
    assert len(menu) < len(default_menu(cd))
    # Sharing a third of the errors is not "most": the pair stays.
    agree[:7, 0, 1] = agree[:7, 1, 0] = False
    assert not error_sharing_pairs(agree, correct).any()


def test_a_budget_target_is_a_number_no_label_moves():
    from training.policy.fit import target_budget

    cd, _ = _synthetic()
    rows = np.arange(len(cd.data.example_ids))
    assert target_budget(cd, rows, "budget", 3.5)[1] == 3.5
    assert target_budget(cd, rows, "cost_fraction", 0.2)[1] == pytest.approx(2.0)  # m2 is the best single, cost 10
    with pytest.raises(ValueError, match="unknown target"):
        target_budget(cd, rows, "cheap", 0.2)
