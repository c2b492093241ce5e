"""Onboarding a new model offline, and the consensus-fit rows: the logic on tiny inputs.

    .venv/bin/python -m pytest -q tests/evaluation/test_onboard.py
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.consensus_eval import consensus_fit_rows, hybrid, side_by_side
from evaluation.onboard import TARGETS, choose_fixed, columns, held_out_fixed, value_table
from evaluation.routing_eval import RoutingData
from evaluation.strategies import CascadeData
from evaluation.strategy_eval import default_menu, evaluate_strategy_policies, fold_simulations


def cd_of(correct, cost, agree=None, folds=None) -> CascadeData:
    correct = np.asarray(correct, bool)
    n, m = correct.shape
    if agree is None:  # answers agree exactly when both are right
        agree = correct[:, :, None] & correct[:, None, :]
        agree[:, range(m), range(m)] = True
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), [f"m{j}" for j in range(m)], correct,
                       np.tile(np.asarray(cost, float), (n, 1)), np.arange(n) % 2 if folds is None else np.asarray(folds))
    return CascadeData(data, agree, np.ones((n, m)), {f"m{j}": n for j in range(m)})


def test_choose_fixed_targets():
    acc = np.array([0.80, 0.90, 0.85, 0.91])
    cost = np.array([1.0, 10.0, 3.0, 5.0])
    singles = np.array([True, True, False, False])
    assert choose_fixed(acc, cost, singles, "match_best", None) == 3  # the cheapest spec at least as accurate as m1
    assert choose_fixed(acc, cost, singles, "cost_fraction", 0.3) == 2  # within 3.0: the most accurate
    assert choose_fixed(acc, cost, singles, "cost_fraction", 0.05) == 0  # nothing fits: the cheapest


def test_held_out_choice_uses_training_folds_and_scores_true_labels():
    # m0 cheap and right on even rows only, m1 dear and always right. Fold = row parity: training on odd rows
    # (m0 always wrong) picks m1 for the even fold; training on even rows (m0 as good as m1) picks m0 for the
    # odd fold, where it is always wrong.
    n = 20
    correct = np.stack([np.arange(n) % 2 == 0, np.ones(n, bool)], axis=1)
    cd = cd_of(correct, [1.0, 10.0])
    out = held_out_fixed(cd, cd.data.correct, rules=())
    ok, paid = out["match_best"]
    even = np.arange(n) % 2 == 0
    assert ok[even].all() and (paid[even] == 10.0).all() and not ok[~even].any() and (paid[~even] == 1.0).all()
    # Fit labels say m0 is always right: the choice moves to m0, the score stays the true one.
    fit = np.ones_like(correct)
    ok, paid = held_out_fixed(cd, fit, rules=())["match_best"]
    assert (paid == 1.0).all() and ok.tolist() == correct[:, 0].tolist()


def test_a_new_models_strategies_are_estimated_on_its_probe_rows_only():
    n = 40
    rng = np.random.default_rng(0)
    correct = np.stack([rng.random(n) < 0.7, np.ones(n, bool), np.ones(n, bool)], axis=1)
    cd = cd_of(correct, [1.0, 10.0, 2.0], folds=np.arange(n) % 2)
    fit = correct.copy()
    probe = np.zeros(n, bool)
    probe[:8] = True
    fit[~probe, 2] = False  # the new model (m2) has no label off its probes: unknown, not wrong
    ok, paid = held_out_fixed(cd, fit, probe=probe, new=2, rules=())["match_best"]
    assert (paid == 2.0).all() and ok.all()  # m2 alone: as accurate as m1 on its probes, cheaper
    cache: dict = {}
    for _ in range(2):  # the pool's simulations, cached per fold, give the same choices
        again = held_out_fixed(cd, fit, probe=probe, new=2, rules=(), cache=cache)["match_best"]
        assert again[1].tolist() == paid.tolist() and again[0].tolist() == ok.tolist()
    assert set(cache) == {0, 1}
    ignored = held_out_fixed(cd, fit, rules=())["match_best"]  # read as wrong everywhere: never chosen
    assert (ignored[1] != 2.0).all()
    with pytest.raises(ValueError, match="no probe query"):
        held_out_fixed(cd, fit, probe=np.arange(n) % 2 == 0, new=2, rules=())


def test_value_table_kept_share_and_intervals():
    n = 100
    base_ok, base_paid = np.zeros(n, bool), np.full(n, 2.0)
    truth_ok, truth_paid = np.arange(n) < 20, np.full(n, 1.0)
    half_ok = np.arange(n) < 10
    base = {"truth": {t: (base_ok, base_paid) for t, _ in TARGETS}, "consensus": {t: (base_ok, base_paid) for t, _ in TARGETS}}
    arms = {"truth": [{t: (truth_ok, truth_paid) for t, _ in TARGETS}],
            "consensus N=50": [{t: (half_ok, truth_paid) for t, _ in TARGETS}, {t: (truth_ok, base_paid) for t, _ in TARGETS}]}
    res = value_table(base, arms, resamples=200)
    assert res["truth"]["cost_fraction"]["value"] == pytest.approx(0.2)
    assert res["truth"]["match_best"]["value"] == pytest.approx(1e6)  # $/M saved
    c = res["consensus N=50"]
    assert c["cost_fraction"]["value"] == pytest.approx(0.15) and c["cost_fraction"]["kept"] == pytest.approx(0.75)
    assert c["match_best"]["kept"] == pytest.approx(0.5)  # two draws: one saves 1e6, one nothing
    lo, hi = c["cost_fraction"]["kept_ci"]
    assert lo <= 0.75 <= hi


def test_columns_keeps_the_chosen_models():
    cd = cd_of(np.ones((4, 3), bool), [1.0, 2.0, 3.0])
    sub = columns(cd, [0, 2])
    assert sub.data.models == ["m0", "m2"] and sub.agree.shape == (4, 2, 2) and sub.data.cost[0].tolist() == [1.0, 3.0]


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


def test_a_budget_target_is_a_number_no_label_moves():
    from evaluation.strategy_eval import _budget

    cd, _ = _synthetic()
    rows = np.arange(len(cd.data.example_ids))
    assert _budget(cd, rows, "budget", 3.5)[1] == 3.5
    assert _budget(cd, rows, "cost_fraction", 0.2)[1] == pytest.approx(2.0)  # m2 is the best single, cost 10
    with pytest.raises(ValueError, match="unknown target"):
        _budget(cd, rows, "cheap", 0.2)


def test_with_model_adds_labels_costs_and_agreement_with_each_pool_model():
    from data.pool import Pool, PoolModel
    from data.schema import Call, Example, Expected, Message, Output
    from data.tools import tools_from_docs
    from evaluation.onboard import PoolState, with_model

    tools = tools_from_docs({"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "number"}},
                                                         "required": ["x"]}})
    ex = {f"t:{i}": Example(id=f"t:{i}", source="t", category="simple", messages=[Message(role="user", content="q")],
                            tools=tools, expected=Expected.exact([Call(name="f", arguments={"x": i})])) for i in range(2)}
    pool = Pool(models=[PoolModel(name="m0", prompt_style="prompt", prices={"usd_per_query": 1.0}),
                        PoolModel(name="m1", prompt_style="prompt", prices={"usd_per_query": 2.0})])
    calls = [[[Call(name="f", arguments={"x": 0})], []], [[Call(name="f", arguments={"x": 5})], [Call(name="f", arguments={"x": 1})]]]
    cd = cd_of([[True, False], [False, True]], [1.0, 2.0], agree=np.tile(np.eye(2, dtype=bool), (2, 1, 1)))
    cd.data.example_ids = ["t:0", "t:1"]
    cd.kinds = np.zeros((2, 2, 2), np.int8)
    st = PoolState(None, pool, ex, {"t:0": 0, "t:1": 1}, cd, np.array([[False, True], [False, False]]), calls)
    new = PoolModel(name="new", prompt_style="prompt", prices={"usd_per_query": 0.5})
    outs = [Output(example_id="t:0", model="new", raw="[f(x=0.0)]", calls=[Call(name="f", arguments={"x": 0.0})]),
            Output(example_id="t:1", model="new", raw="no", decode_error="no_call: free text")]
    cd9, declined = with_model(st, new, outs)
    assert cd9.data.models == ["m0", "m1", "new"] and cd9.data.correct[:, 2].tolist() == [True, False]
    assert cd9.data.cost[:, 2].tolist() == [0.5, 0.5]
    assert cd9.agree[0, 0, 2] and cd9.agree[0, 2, 0] and not cd9.agree[0, 1, 2]  # x=0.0 means x=0
    assert not cd9.agree[1, 0, 2] and not cd9.agree[1, 1, 2]
    assert cd9.kinds[1, 0, 2] == 2 and cd9.kinds[1, 2, 0] == 1  # second_declines / first_declines (1-based codes)
    assert declined.tolist() == [[False, True, False], [False, False, True]]
    with pytest.raises(ValueError, match="no recorded output for 1"):
        with_model(st, new, outs[:1])
