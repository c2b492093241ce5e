"""The strategies on recordings: the cascade's runs simulated (training.policy.simulate), the menu, the resolve
rules fitted per kind of disagreement, the policy's regularisation (training.policy.fit).

    .venv/bin/python -m pytest -q tests/training/policy/test_simulate.py
"""

from __future__ import annotations

import numpy as np
import pytest

from data.pool import Pool
from data.schema import Call, Example, Expected, Message, Output, Tool
from evaluation.offline.routing_eval import RoutingData
from training.policy.simulate import CascadeData, menu_of, pareto_menu, simulate, spec_name
from tests.training.policy.helpers import COSTS, MODELS, cascade_data, synthetic


def test_agreement_answers_with_the_cheaper_and_pays_both():
    # Row 0: they agree, only b is right (labels can differ in rare cases): the cheaper's (a's) label counts.
    cd = cascade_data([[False, True, True], [True, True, False]], agree_ab=[True, True])
    sim = simulate(cd, [(0, 1, None, 2)], COSTS)
    assert sim.correct[:, 0].tolist() == [False, True]
    assert sim.cost[:, 0].tolist() == [3.0, 3.0]
    assert sim.latency[:, 0].tolist() == [2.0, 2.0]  # concurrent: the slower
    assert sim.calls[:, 0].tolist() == [2, 2] and not sim.escalated.any()


def test_disagreement_escalates_and_sums_latency():
    cd = cascade_data([[True, False, True], [True, False, False]], agree_ab=[False, False])
    sim = simulate(cd, [(0, 1, None, 2), (0, 1, None, 0)], COSTS)
    assert sim.correct[:, 0].tolist() == [True, False]  # the strong model's labels
    assert sim.cost[:, 0].tolist() == [13.0, 13.0] and sim.calls[:, 0].tolist() == [3, 3]
    assert sim.latency[:, 0].tolist() == [7.0, 7.0]  # max(1, 2) + 5
    # Escalating to a model already called reuses its answer: no new call, no new cost.
    assert sim.correct[:, 1].tolist() == [True, True] and sim.cost[:, 1].tolist() == [3.0, 3.0]
    assert sim.calls[:, 1].tolist() == [2, 2] and sim.escalated[:, 1].all()


def test_tie_breaker_sides_with_one_then_escalates_when_it_agrees_with_neither():
    cd = cascade_data([[False, True, True], [True, False, False], [False, False, False]], agree_ab=[False] * 3,
             agree_ta=[False, True, False], agree_tb=[True, False, False])
    # 4 models are needed for t → e; reuse column 0 as e (already called).
    sim = simulate(cd, [(0, 1, 2, 0)], COSTS)
    # Row 0: t agrees with b → the cheaper of (b, t) = b (2 < 10), right. Row 1: t agrees with a → a, right.
    # Row 2: t agrees with neither → e = a, wrong.
    assert sim.correct[:, 0].tolist() == [True, True, False]
    assert sim.cost[:, 0].tolist() == [13.0, 13.0, 13.0] and sim.calls[:, 0].tolist() == [3, 3, 3]
    assert sim.latency[:, 0].tolist() == [7.0, 7.0, 7.0]


def test_an_agreement_answers_with_the_cheaper_whichever_side_it_is_on():
    # They agree on both rows; a is right on row 0 only, b on row 1 only (labels can differ in rare cases).
    cd = cascade_data([[True, False, False], [False, True, False]], agree_ab=[True, True])
    a_cheaper = simulate(cd, [(0, 1, None, 2)], np.array([1.0, 2.0, 10.0]))
    b_cheaper = simulate(cd, [(0, 1, None, 2)], np.array([2.0, 1.0, 10.0]))
    assert a_cheaper.correct[:, 0].tolist() == [True, False]  # a's labels
    assert b_cheaper.correct[:, 0].tolist() == [False, True]  # b's labels


def test_a_tie_break_answers_with_the_cheaper_of_the_agreeing_pair_whichever_it_is():
    """Four models, e dearest and wrong everywhere; each row's label says which model answered."""
    models = ["a", "b", "t", "e"]
    # Rows: 0 t sides with a, 1 t sides with b, 2 t sides with both (a and b still disagree), 3 with neither.
    agree_ta, agree_tb = [True, False, True, False], [False, True, True, False]
    n = 4
    agree = np.zeros((n, 4, 4), bool)
    agree[:, range(4), range(4)] = True
    agree[:, 2, 0] = agree[:, 0, 2] = agree_ta
    agree[:, 2, 1] = agree[:, 1, 2] = agree_tb

    def answered_by(costs, correct_col):
        correct = np.zeros((n, 4), bool)
        correct[:, correct_col] = True
        data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), models, correct,
                           np.tile(costs, (n, 1)), np.zeros(n, int))
        cd = CascadeData(data, agree, np.ones((n, 4)), {m: n for m in models})
        return simulate(cd, [(0, 1, 2, 3)], costs).correct[:, 0].tolist()

    t_cheapest, t_dearest = np.array([2.0, 3.0, 1.0, 10.0]), np.array([1.0, 2.0, 5.0, 10.0])
    b_cheapest = np.array([3.0, 1.0, 2.0, 10.0])
    # t the cheapest: t answers whenever it sides with anyone.
    assert answered_by(t_cheapest, 2) == [True, True, True, False]
    assert answered_by(t_cheapest, 0) == answered_by(t_cheapest, 1) == [False] * 4
    # t the dearest: the first model it sides with answers; siding with both, the cheaper of a and b (a).
    assert answered_by(t_dearest, 0) == [True, False, True, False]
    assert answered_by(t_dearest, 1) == [False, True, False, False]
    assert answered_by(t_dearest, 2) == [False] * 4
    # Siding with both when b is the cheapest of the three: b answers (as the gateway does).
    assert answered_by(b_cheapest, 1) == [False, True, True, False]
    assert answered_by(b_cheapest, 2) == [True, False, False, False]
    # With neither, e answers.
    assert answered_by(t_dearest, 3) == [False, False, False, True]


def test_unknown_latency_stays_unknown():
    cd = cascade_data([[True, True, True]], agree_ab=[True], latency=[[np.nan, 2.0, 5.0]])
    sim = simulate(cd, [(0, 1, None, 2), (1, 1, None, 1)], COSTS)
    assert np.isnan(sim.latency[0, 0]) and sim.latency[0, 1] == 2.0


def test_menu_and_frontier():
    specs = menu_of(3)
    assert len(specs) == 3 + 3 * (3 + 2)  # singles; per pair: 3 escalations, and the third model as t when e ≠ t
    assert sum(1 for a, b, _, _ in specs if a == b) == 3
    assert spec_name((0, 1, 2, 2), MODELS).startswith("agree(cheap_a, cheap_b")  # t == e is never listed…
    assert (0, 1, 2, 2) not in specs
    cd = cascade_data([[False, True, True]] * 4, agree_ab=[True] * 4)
    sim = simulate(cd, specs, COSTS)
    front = pareto_menu(sim, np.arange(4))
    accs = sim.correct.mean(axis=0)[front]
    costs = sim.cost.mean(axis=0)[front]
    assert list(costs) == sorted(costs) and all(np.diff(accs) > 0)


def test_from_outputs_reads_native_text_as_no_call_and_refuses_missing_outputs():
    tool = Tool(name="f", parameters={"type": "object", "properties": {"a": {"type": "integer"}}})
    ex = Example(id="x:0", source="x", category="c", messages=[Message(role="user", content="hi")], tools=[tool],
                 expected=Expected.nothing())
    pool = Pool.model_validate({"models": [
        {"name": "p", "prompt_style": "prompt", "prices": {"input_per_mtok": 1, "output_per_mtok": 1}},
        {"name": "n", "prompt_style": "native", "prices": {"input_per_mtok": 1, "output_per_mtok": 1}},
        {"name": "q", "prompt_style": "prompt", "prices": {"input_per_mtok": 1, "output_per_mtok": 1}},
    ]})
    data = RoutingData(["x:0"], np.array(["c"]), ["p", "n", "q"], np.ones((1, 3), bool), np.ones((1, 3)), np.zeros(1, int))
    outs = [Output(example_id="x:0", model="p", raw="I cannot help", decode_error="free text", latency_s=1.5),
            Output(example_id="x:0", model="n", raw="f(a=1) would do it", calls=[Call(name="f", arguments={"a": 1})]),
            Output(example_id="x:0", model="q", raw="[f(a=1)]", calls=[Call(name="f", arguments={"a": 1})])]
    cd = CascadeData.from_outputs(outs, {"x:0": ex}, pool, data)
    assert cd.agree[0, 0, 1]  # text and a native model's prose: both no call
    assert not cd.agree[0, 0, 2] and not cd.agree[0, 1, 2]
    # How they disagree, from each side (codes: 1 + DISAGREEMENT_KINDS index); 0 where they agree.
    assert cd.kinds[0, 0, 1] == cd.kinds[0, 1, 0] == 0
    assert cd.kinds[0, 0, 2] == 1 and cd.kinds[0, 2, 0] == 2  # p declines, q calls: first_declines / second_declines
    assert cd.subset(np.array([0])).kinds.shape == (1, 3, 3)
    assert cd.latency[0, 0] == 1.5 and np.isnan(cd.latency[0, 1])
    with pytest.raises(ValueError, match="no recorded output"):
        CascadeData.from_outputs(outs[:2], {"x:0": ex}, pool, data)


def test_resolve_rules_are_fitted_on_training_rows_per_kind_of_disagreement():
    from data.verify.agree import DISAGREEMENT_KINDS

    # 40 disagreements: rows 0-19 "first_declines" where a is right (so is strong); rows 20-39 "arguments"
    # where only strong is right. Rules are fitted on the even rows only.
    n = 40
    correct = np.array([[True, False, True]] * 20 + [[False, False, True]] * 20)
    cd = cascade_data(correct, agree_ab=[False] * n)
    cd.kinds = np.zeros((n, 3, 3), np.int8)
    cd.kinds[:20, 0, 1] = DISAGREEMENT_KINDS.index("first_declines") + 1
    cd.kinds[20:, 0, 1] = DISAGREEMENT_KINDS.index("arguments") + 1
    train = np.arange(0, n, 2)
    sim = simulate(cd, [(0, 1, None, 2), (0, 1, None, 2, 0.0)], COSTS, fit_rows=train)
    assert sim.rules == {1: {"first_declines": "first"}}  # arguments: going on (escalating) is best, no rule
    assert sim.cost[:20, 1].tolist() == [3.0] * 20 and sim.correct[:20, 1].all()  # answered by a at once
    assert sim.calls[:20, 1].tolist() == [2] * 20 and not sim.escalated[:20, 1].any()
    assert sim.cost[20:, 1].tolist() == [13.0] * 20 and sim.correct[20:, 1].all() and sim.escalated[20:, 1].all()
    assert sim.correct[:, 0].all() and sim.cost[:, 0].tolist() == [13.0] * n  # the spec without rules
    assert spec_name((0, 1, None, 2, 0.0), MODELS, sim.rules[1]) == "agree(cheap_a, cheap_b → strong; first_declines: first)"
    # Labels of rows outside fit_rows never move a rule.
    flipped = cascade_data(correct.copy(), agree_ab=[False] * n)
    flipped.kinds = cd.kinds
    flipped.data.correct[1:20:2, 0] = False
    assert simulate(flipped, [(0, 1, None, 2, 0.0)], COSTS, fit_rows=train).rules == {0: {"first_declines": "first"}}
    # With a tolerance, a cheaper way a little less accurate is taken: a is right on 9 of the 10 training rows.
    worse = cascade_data(correct.copy(), agree_ab=[False] * n)
    worse.kinds, worse.data.correct[0, 0] = cd.kinds, False
    assert simulate(worse, [(0, 1, None, 2, 0.0)], COSTS, fit_rows=train).rules == {0: {}}
    assert simulate(worse, [(0, 1, None, 2, 0.1)], COSTS, fit_rows=train).rules == {0: {"first_declines": "first"}}
    # Fewer than MIN_RULE_ROWS rows of a kind: no rule for it.
    assert simulate(cd, [(0, 1, None, 2, 0.0)], COSTS, fit_rows=train[:5]).rules == {0: {}}
    with pytest.raises(ValueError, match="fit_rows"):
        simulate(cd, [(0, 1, None, 2, 0.0)], COSTS)
    cd.kinds = None
    with pytest.raises(ValueError, match="kinds of disagreement"):
        simulate(cd, [(0, 1, None, 2, 0.0)], COSTS, fit_rows=train)


def test_escalate_rule_skips_the_tie_breaker():
    from data.verify.agree import DISAGREEMENT_KINDS

    # Four models: a, b, a tie-breaker t that sides with b (wrongly) on every row, and e right everywhere.
    n = 20
    models, costs = ["a", "b", "t", "e"], np.array([1.0, 2.0, 1.0, 10.0])
    correct = np.array([[False, False, False, True]] * n)
    agree = np.zeros((n, 4, 4), bool)
    agree[:, range(4), range(4)] = True
    agree[:, 2, 1] = agree[:, 1, 2] = True
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), models, correct, np.tile(costs, (n, 1)),
                       np.zeros(n, int))
    kinds = np.zeros((n, 4, 4), np.int8)
    kinds[:, 0, 1] = DISAGREEMENT_KINDS.index("count") + 1
    cd = CascadeData(data, agree, np.ones((n, 4)), {m: n for m in models}, kinds)
    sim = simulate(cd, [(0, 1, 2, 3), (0, 1, 2, 3, 0.0)], costs, fit_rows=np.arange(n))
    assert not sim.correct[:, 0].any()  # the tie-breaker sides with b: wrong
    assert sim.rules[1] == {"count": "escalate"} and sim.correct[:, 1].all()
    assert sim.cost[:, 1].tolist() == [13.0] * n and sim.calls[:, 1].tolist() == [3] * n  # t never called


def test_the_regressions_regularisation_is_chosen_on_inner_folds_by_a_standard_error_rule():
    """Informative router probabilities earn per-request choices (c > 0, non-zero coefficients); between grid
    values whose cross-fitted results differ by less than `noise_se` standard errors (none by default: a tie), the
    simplest (c = 0: one strategy for every request) is kept."""
    from training.policy.fit import _simplest_within_noise, fit_policies

    cd, probs = synthetic()
    specs = menu_of(3)
    rows = np.arange(len(probs))
    sim = simulate(cd, specs, COSTS)
    informed = fit_policies(cd, probs, rows, sim, specs, [("cost_fraction", 0.5)])[0][0]
    assert informed.c > 0 and np.abs(informed.coef).max() > 0
    zero = StrategyPolicy_fit_zero(cd, probs)
    assert not zero.coef.any() and len(set(zero.choose(probs))) == 1

    rng = np.random.default_rng(0)
    base = (rng.random(400) < 0.9).astype(float)
    one_more = base.copy()
    one_more[np.flatnonzero(base == 0)[:2]] = 1.0  # 2 of 400 rows better: within noise
    many_more = base.copy()
    many_more[np.flatnonzero(base == 0)[:30]] = 1.0  # 30 of 400 better: beyond it
    paid = np.full(400, 1.0)
    pick = _simplest_within_noise
    assert pick({0.0: (base, paid), 0.3: (one_more, paid)}, "cost_fraction", 0.9, 2.0, noise_se=2.0) == 0.0
    assert pick({0.0: (base, paid), 0.3: (many_more, paid)}, "cost_fraction", 0.9, 2.0, noise_se=2.0) == 0.3
    assert pick({0.0: (base, paid), 0.3: (one_more, paid)}, "cost_fraction", 0.9, 2.0, noise_se=0.0) == 0.3  # argmax
    assert pick({0.0: (base, paid), 0.3: (base, paid)}, "cost_fraction", 0.9, 2.0, noise_se=0.0) == 0.0  # a tie
    # Over budget is not "within noise" of a row that keeps it.
    assert pick({0.0: (base, paid * 3), 0.3: (base, paid)}, "cost_fraction", 0.9, 2.0, noise_se=2.0) == 0.3


def StrategyPolicy_fit_zero(cd, probs):
    from training.policy import StrategyPolicy
    from training.policy.simulate import to_strategy

    specs = menu_of(3)
    sim = simulate(cd, specs, COSTS)
    return StrategyPolicy.fit(cd.data.models, [to_strategy(x, cd.data.models) for x in specs], probs, sim.correct,
                              sim.cost, c=0.0, lam=20.0)


def _large_pool(m=10, n=400, seed=0):
    """m models: 0 and 1 cheap, right on different halves of the rows, agreeing only where both are right; the last
    one strong and dear; the rest dear and mostly wrong."""
    rng = np.random.default_rng(seed)
    correct = rng.random((n, m)) < 0.3
    correct[:, 0], correct[:, 1] = np.arange(n) % 2 == 0, np.arange(n) % 3 != 0
    correct[:, -1] = rng.random(n) < 0.95
    agree = np.zeros((n, m, m), bool)
    for a in range(m):
        for b in range(m):
            agree[:, a, b] = (a == b) | (correct[:, a] & correct[:, b])
    cost = np.tile(np.r_[1.0, 1.5, np.full(m - 3, 20.0), 30.0], (n, 1))
    names = [f"m{j}" for j in range(m)]
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), names, correct, cost, np.arange(n) % 5)
    return CascadeData(data, agree, np.ones((n, m)), {x: n for x in names})


def test_a_large_pool_builds_its_cascades_from_the_screened_models_and_keeps_every_single():
    from training.policy.fit import MENU_MODELS, default_menu, screen_models

    cd = _large_pool()
    keep = screen_models(cd, np.arange(400))
    assert len(keep) == MENU_MODELS and {0, 1, 9} <= set(keep)  # the two cheap complements and the strong one
    menu = default_menu(cd)
    assert {s[0] for s in menu if s[0] == s[1]} == set(range(10))  # every model stays a single
    used = {c for s in menu if s[0] != s[1] for c in (s[0], s[1], s[3], *([s[2]] if s[2] is not None else []))}
    assert used == set(keep)
    assert len(menu) == len(menu_of(MENU_MODELS)) + 2  # the two unscreened models as singles


def test_the_screen_reads_only_the_rows_it_is_given():
    from training.policy.fit import screen_models

    cd = _large_pool()
    rows = np.arange(200)
    flipped = cd.data.correct.copy()
    flipped[200:] = ~flipped[200:]
    other = CascadeData(RoutingData(cd.data.example_ids, cd.data.categories, cd.data.models, flipped, cd.data.cost,
                                    cd.data.folds), cd.agree, cd.latency, cd.latency_known)
    assert screen_models(cd, rows) == screen_models(other, rows)
