"""Onboarding a new model offline, and the consensus-fit rows: the logic on tiny inputs.

    .venv/bin/python -m pytest -q tests/evaluation/test_onboard.py
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.consensus_eval import consensus_fit_rows, hybrid, side_by_side
from evaluation.onboard import (TARGETS, choose_fixed, columns, held_out_fixed, held_out_fixed_gates, small_x_menu,
                                 value_table)
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
    # Both sides of each target: the consensus arm's accuracy change (0.15) and cost change (-0.5 per query).
    assert c["match_best"]["accuracy_change"] == pytest.approx(0.15)
    assert c["match_best"]["usd_per_million_change"] == pytest.approx(-0.5e6)
    lo, hi = c["match_best"]["accuracy_change_ci"]
    assert lo < 0.15 < hi
    from evaluation.onboard import markdown

    table = markdown([{"model": "x", "true_accuracy": 0.5, "usd_per_million": 1.0, "values": res}])
    assert len(table) == 4 and "+0.1500 [" in table[3]


def _paying(usd: float, n: int = 100) -> dict:
    """Every target's outcome of an arm that is always right and pays `usd` per query."""
    return {t: (np.ones(n, bool), np.full(n, usd)) for t, _ in TARGETS}


def test_reference_arms_share_the_consensus_baseline():
    # The consensus no-new-model policy is cheaper than the truth one (as consensus labels make it on real
    # pools): a consensus arm's value against its own baseline, as a share of the truth arm's, then mixes in
    # that difference; the reference arm (the pool's consensus labels, the new model on every query) shares the
    # consensus baseline, so the share of it does not.
    from evaluation.onboard import REF_TRUTH, reference_markdown

    base = {"truth": _paying(4.0), "consensus": _paying(3.0)}
    arms = {"truth": [_paying(1.0)],  # saves 3 per query
            REF_TRUTH: [_paying(1.0)],  # saves 2 on the consensus baseline
            "consensus N=200": [_paying(1.2)]}  # saves 1.8
    res = value_table(base, arms, resamples=100)
    c = res["consensus N=200"]["match_best"]
    assert res[REF_TRUTH]["match_best"]["value"] == pytest.approx(2e6)
    assert c["kept"] == pytest.approx(0.6) and c["kept_of"][REF_TRUTH]["kept"] == pytest.approx(0.9)
    assert res[REF_TRUTH]["match_best"]["kept_of"] == {} and "kept_of" not in res["truth"]["match_best"]
    table = reference_markdown([{"model": "x", "values": res}])
    assert len(table) == 5 and "| x | consensus N=200 |" in table[4] and "90%" in table[4]
    assert table[3].startswith(f"| x | {REF_TRUTH} | —")  # a reference arm is not a share of itself


def test_the_truth_pool_ceiling_arm_is_a_share_of_the_truth_arm():
    # X's consensus labels on every query beside the pool's *true* labels: measured against the truth baseline
    # (the pool is labelled as in the truth arm), so its `kept` is the share of the truth arm, and no consensus
    # arm is read as a share of it.
    from evaluation.onboard import REF_TRUTH, TRUTH_POOL_X_CONSENSUS

    base = {"truth": _paying(4.0), "consensus": _paying(3.0)}
    arms = {"truth": [_paying(1.0)],  # saves 3 per query
            REF_TRUTH: [_paying(1.0)],
            TRUTH_POOL_X_CONSENSUS: [_paying(1.6)],  # saves 2.4 of the truth's 3
            "consensus N=200": [_paying(1.2)]}
    res = value_table(base, arms, resamples=100)
    ceiling = res[TRUTH_POOL_X_CONSENSUS]["match_best"]
    assert ceiling["baseline_usd_per_million"] == pytest.approx(4e6)
    assert ceiling["kept"] == pytest.approx(0.8) and "kept_of" not in ceiling
    assert set(res["consensus N=200"]["match_best"]["kept_of"]) == {REF_TRUTH}


def test_columns_keeps_the_chosen_models():
    cd = cd_of(np.ones((4, 3), bool), [1.0, 2.0, 3.0])
    sub = columns(cd, [0, 2])
    assert sub.data.models == ["m0", "m2"] and sub.agree.shape == (4, 2, 2) and sub.data.cost[0].tolist() == [1.0, 3.0]


def _budget_case():
    # m0 cost 1 (right on half the rows), m1 cost 2 (right on 4 rows of 5), m2 cost 10 (always right); in
    # both folds (row parity) alike.
    n = 40
    r = np.arange(n)
    correct = np.stack([r % 4 < 2, r % 5 != 0, np.ones(n, bool)], axis=1)
    return cd_of(correct, [1.0, 2.0, 10.0], folds=r % 2)


def test_the_given_budget_does_not_move_with_the_fit_labels():
    from evaluation.onboard import pool_budgets

    cd = _budget_case()
    budgets = pool_budgets(cd)
    assert budgets == {0: pytest.approx(2.0), 1: pytest.approx(2.0)}  # 20% of m2, the true best single
    fit = np.zeros_like(cd.data.correct)
    fit[:, 1] = True  # the fit labels rank m1 first: "20% of the best single" read off them is 0.4 per query
    given = held_out_fixed(cd, fit, rules=(), budgets=budgets)["cost_fraction"]
    assert (given[1] == 2.0).all()  # m1, within the given 2.0
    anchored = held_out_fixed(cd, fit, rules=())["cost_fraction"]
    assert (anchored[1] == 1.0).all()  # nothing within 0.4: the cheapest, m0
    truth = held_out_fixed(cd, cd.data.correct, rules=(), budgets=budgets)["cost_fraction"]
    assert (truth[1] == 2.0).all()  # same budget with the true labels


def test_a_new_model_the_policy_never_calls_is_worth_nothing():
    # The pool is m0, m1 (best single m1: budget 0.4 buys only m0). Adding m2 (dear, always right) must not
    # raise the budget to 20% of m2's cost, which buys m1 and looks like a value of m2 it never earned.
    from evaluation.onboard import pool_budgets

    cd3 = _budget_case()
    cd2 = columns(cd3, [0, 1])
    budgets = pool_budgets(cd2)
    assert budgets == {0: pytest.approx(0.4), 1: pytest.approx(0.4)}
    base = held_out_fixed(cd2, cd2.data.correct, rules=(), budgets=budgets, anchor_models=2)
    with_new = held_out_fixed(cd3, cd3.data.correct, rules=(), budgets=budgets, anchor_models=2)
    for t, _ in TARGETS:
        assert with_new[t][0].tolist() == base[t][0].tolist() and with_new[t][1].tolist() == base[t][1].tolist()
    moved = held_out_fixed(cd3, cd3.data.correct, rules=())  # the label-anchored targets move with m2
    assert (moved["cost_fraction"][1] == 2.0).all() and (base["cost_fraction"][1] == 1.0).all()
    assert moved["match_best"][1].mean() > base["match_best"][1].mean()  # the bar rose to m2's accuracy


def test_the_truth_arm_as_all_row_probes_is_the_plain_truth_arm():
    cd, _ = _synthetic(n=120)
    every = np.ones(len(cd.data.example_ids), bool)
    plain = held_out_fixed(cd, cd.data.correct, rules=())
    cache: dict = {}
    for _ in range(2):  # the second call reads the pool's simulations from the cache
        split = held_out_fixed(cd, cd.data.correct, probe=every, new=2, rules=(), paired=False, cache=cache)
        for t, _ in TARGETS:
            assert split[t][0].tolist() == plain[t][0].tolist() and split[t][1].tolist() == plain[t][1].tolist()


def test_the_gate_adopts_the_new_model_only_on_a_significant_paired_advantage():
    # Pool: m0 (cost 1, right on half the rows), m1 (cost 10, always right); budget 2.0 buys m0 alone. The new
    # m2 (cost 1.5) is always right. On 4 probe rows (2 per training fold, m0 wrong on one of them) it looks
    # 0.5 better, but from 2 rows that is not significant; on every row (20 per training fold) it is.
    n = 40
    r = np.arange(n)
    correct = np.stack([r % 4 >= 2, np.ones(n, bool), np.ones(n, bool)], axis=1)
    cd = cd_of(correct, [1.0, 10.0, 1.5], folds=r % 2)
    budgets = {0: 2.0, 1: 2.0}
    few = np.isin(r, [0, 1, 2, 3])
    for probe, gate, calls_new in ((few, None, True), (few, 1.645, False), (np.ones(n, bool), 1.645, True)):
        paid = held_out_fixed(cd, correct, probe=probe, new=2, rules=(), budgets=budgets, anchor_models=2,
                              gate=gate)["cost_fraction"][1]
        assert (paid == 1.5).all() if calls_new else (paid == 1.0).all()
    both = held_out_fixed_gates(cd, correct, probe=few, new=2, rules=(), budgets=budgets, anchor_models=2,
                                gates=(None, 1.645))  # one simulation, both choices
    assert (both[None]["cost_fraction"][1] == 1.5).all() and (both[1.645]["cost_fraction"][1] == 1.0).all()


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
    from evaluation.consensus_eval import menu_apart

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


def test_onboard_model_refuses_unknown_probe_labels():
    from evaluation.onboard import onboard_model

    with pytest.raises(ValueError, match="probe_labels must be"):
        onboard_model(None, "x", probe_labels="oracle")
    with pytest.raises(ValueError, match="relabel"):
        onboard_model(None, "x", probe_labels="truth", impute=4, relabel=True)
    with pytest.raises(ValueError, match="pool_labels must be"):
        onboard_model(None, "x", pool_labels="oracle")


def test_screen_table_marks_significant_values_and_lists_skipped_models():
    from evaluation.onboard_screen import screen_markdown

    def value(v, lo, hi):
        return {"value": v, "value_ci": [lo, hi], "accuracy": 0.9, "usd_per_million": 100.0}

    rows = [{"model": "a", "true_accuracy": 0.8, "usd_per_million": 50.0,
             "values": {"cost_fraction": value(0.01, 0.002, 0.02), "match_best": value(5.0, -1.0, 9.0)}},
            {"model": "b", "true_accuracy": 0.7, "usd_per_million": 20.0,
             "values": {"cost_fraction": value(0.0, 0.0, 0.0), "match_best": value(30.0, 12.0, 50.0)}},
            {"model": "c", "skipped": "no price"}]
    table = screen_markdown(rows)
    assert table[2].startswith("| a ") and "+0.0100 [+0.0020, +0.0200] *" in table[2] and "+5 [-1, +9] |" in table[2]
    assert table[3].startswith("| b ") and "+0.0000 [+0.0000, +0.0000] |" in table[3] and "+30 [+12, +50] *" in table[3]
    assert table[4] == "| c | skipped: no price | | | |"


def test_small_x_menu_puts_the_new_model_in_one_role_of_the_incumbent():
    base = [(4, 4, None, 4)]
    assert small_x_menu((0, 1, 2, 3, 0.02), 4, rules=()) == [*base, (1, 4, 2, 3), (0, 4, 2, 3), (0, 1, 4, 3), (0, 1, 2, 4)]
    assert small_x_menu((2, 2, None, 2), 4, rules=()) == [*base, (2, 4, None, 2), (2, 4, None, 4)]
    assert small_x_menu((1, 3, None, 0), 2, rules=(0.0,)) == [(2, 2, None, 2), (2, 3, None, 0), (2, 3, None, 0, 0.0),
                                                              (1, 2, None, 0), (1, 2, None, 0, 0.0),
                                                              (1, 3, None, 2), (1, 3, None, 2, 0.0)]
    assert len(small_x_menu((0, 1, 2, 3), 4)) == 1 + 4 * 3  # every role, each with the menu's two rules and none
    with pytest.raises(ValueError, match="already calls"):
        small_x_menu((0, 2, None, 1), 2)


def test_the_small_x_menu_offers_only_the_incumbents_neighbours():
    # Pool: m0 (cost 1, right on 70%), m1 (cost 10, always right): at best-single accuracy the incumbent is m1.
    # The new m2 (cost 1, right on 70%, independently of m0): agree(m0, m2 → m1) is as accurate as m1 for
    # ~2 + 0.5 × 10 — the full menu takes it; the small menu around m1 offers only single(m2) (70%) and
    # agree(m1, m2 → m1 or m2) (cost 11), so it keeps m1. A new model right everywhere is single(m2): both take it.
    n = 200
    rng = np.random.default_rng(1)
    correct = np.stack([rng.random(n) < 0.7, np.ones(n, bool), rng.random(n) < 0.7], axis=1)
    cd = cd_of(correct, [1.0, 10.0, 1.0], folds=np.arange(n) % 2)
    every = np.ones(n, bool)
    kw = dict(probe=every, new=2, rules=(), anchor_models=2)
    full = held_out_fixed(cd, correct, x_menu="all", **kw)["match_best"]
    small = held_out_fixed(cd, correct, x_menu="small", **kw)["match_best"]
    assert full[0].all() and full[1].mean() < 8.5  # the cascade of m0 and m2, cheaper than m1
    assert small[0].all() and (small[1] == 10.0).all()  # m1 kept: the cascade is not on the small menu
    right = correct.copy()
    right[:, 2] = True
    cd_right = cd_of(right, [1.0, 10.0, 1.0], folds=np.arange(n) % 2)
    picked = held_out_fixed(cd_right, right, x_menu="small", **kw)["match_best"]
    assert picked[0].all() and (picked[1] == 1.0).all()  # single(m2) is on the small menu
    with pytest.raises(ValueError, match="x_menu"):
        held_out_fixed(cd, correct, x_menu="tiny", **kw)
    with pytest.raises(ValueError, match="paired"):
        held_out_fixed(cd, correct, x_menu="small", paired=False, **kw)
