"""Strategies on recordings: the cascade rules, the menu, the held-out policy, the bootstrap.

    .venv/bin/python -m pytest -q tests/evaluation/test_strategies.py
"""

from __future__ import annotations

import numpy as np
import pytest

from data.pool import Pool
from data.schema import Call, Example, Expected, Message, Output, Tool
from evaluation.routing_eval import RoutingData
from evaluation.stats import paired_bootstrap
from evaluation.strategies import CascadeData, menu_of, pareto_menu, simulate, spec_name
from evaluation.strategy_eval import best_fixed_strategy, evaluate_strategy_policy, fold_simulations

MODELS = ["cheap_a", "cheap_b", "strong"]
COSTS = np.array([1.0, 2.0, 10.0])


def _cd(correct, agree_ab, agree_ta=None, agree_tb=None, latency=None, folds=None):
    correct = np.asarray(correct, bool)
    n = len(correct)
    agree = np.zeros((n, 3, 3), bool)
    agree[:, range(3), range(3)] = True
    agree[:, 0, 1] = agree[:, 1, 0] = agree_ab
    if agree_ta is not None:
        agree[:, 2, 0] = agree[:, 0, 2] = agree_ta
    if agree_tb is not None:
        agree[:, 2, 1] = agree[:, 1, 2] = agree_tb
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), MODELS, correct,
                       np.tile(COSTS, (n, 1)), np.zeros(n, int) if folds is None else np.asarray(folds))
    lat = np.tile([1.0, 2.0, 5.0], (n, 1)) if latency is None else np.asarray(latency, float)
    return CascadeData(data, agree, lat, {m: n for m in MODELS})


def test_agreement_answers_with_the_cheaper_and_pays_both():
    # Row 0: they agree, only b is right (labels can differ in rare cases): the cheaper's (a's) label counts.
    cd = _cd([[False, True, True], [True, True, False]], agree_ab=[True, True])
    sim = simulate(cd, [(0, 1, None, 2)], COSTS)
    assert sim.correct[:, 0].tolist() == [False, True]
    assert sim.cost[:, 0].tolist() == [3.0, 3.0]
    assert sim.latency[:, 0].tolist() == [2.0, 2.0]  # concurrent: the slower
    assert sim.calls[:, 0].tolist() == [2, 2] and not sim.escalated.any()


def test_disagreement_escalates_and_sums_latency():
    cd = _cd([[True, False, True], [True, False, False]], agree_ab=[False, False])
    sim = simulate(cd, [(0, 1, None, 2), (0, 1, None, 0)], COSTS)
    assert sim.correct[:, 0].tolist() == [True, False]  # the strong model's labels
    assert sim.cost[:, 0].tolist() == [13.0, 13.0] and sim.calls[:, 0].tolist() == [3, 3]
    assert sim.latency[:, 0].tolist() == [7.0, 7.0]  # max(1, 2) + 5
    # Escalating to a model already called reuses its answer: no new call, no new cost.
    assert sim.correct[:, 1].tolist() == [True, True] and sim.cost[:, 1].tolist() == [3.0, 3.0]
    assert sim.calls[:, 1].tolist() == [2, 2] and sim.escalated[:, 1].all()


def test_tie_breaker_sides_with_one_then_escalates_when_it_agrees_with_neither():
    models3 = ["a", "b", "t"]
    cd = _cd([[False, True, True], [True, False, False], [False, False, False]], agree_ab=[False] * 3,
             agree_ta=[False, True, False], agree_tb=[True, False, False])
    cd.data.models = models3 + []
    # 4 models are needed for t → e; reuse column 0 as e (already called).
    sim = simulate(cd, [(0, 1, 2, 0)], COSTS)
    # Row 0: t agrees with b → the cheaper of (b, t) = b (2 < 10), right. Row 1: t agrees with a → a, right.
    # Row 2: t agrees with neither → e = a, wrong.
    assert sim.correct[:, 0].tolist() == [True, True, False]
    assert sim.cost[:, 0].tolist() == [13.0, 13.0, 13.0] and sim.calls[:, 0].tolist() == [3, 3, 3]
    assert sim.latency[:, 0].tolist() == [7.0, 7.0, 7.0]


def test_unknown_latency_stays_unknown():
    cd = _cd([[True, True, True]], agree_ab=[True], latency=[[np.nan, 2.0, 5.0]])
    sim = simulate(cd, [(0, 1, None, 2), (1, 1, None, 1)], COSTS)
    assert np.isnan(sim.latency[0, 0]) and sim.latency[0, 1] == 2.0


def test_menu_and_frontier():
    specs = menu_of(3)
    assert len(specs) == 3 + 3 * (3 + 2)  # singles; per pair: 3 escalations, and the third model as t when e ≠ t
    assert sum(1 for a, b, _, _ in specs if a == b) == 3
    assert spec_name((0, 1, 2, 2), MODELS).startswith("agree(cheap_a, cheap_b")  # t == e is never listed…
    assert (0, 1, 2, 2) not in specs
    cd = _cd([[False, True, True]] * 4, agree_ab=[True] * 4)
    sim = simulate(cd, specs, COSTS)
    front = pareto_menu(sim, np.arange(4))
    accs = sim.correct.mean(axis=0)[front]
    costs = sim.cost.mean(axis=0)[front]
    assert list(costs) == sorted(costs) and all(np.diff(accs) > 0)


def _synthetic(n=600, seed=0):
    """Cheap models right 85%/80%, agreeing when both right; strong right 95%; 5 folds."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.3
    a = rng.random(n) < np.where(hard, 0.5, 0.99)
    b = rng.random(n) < np.where(hard, 0.4, 0.98)
    s = rng.random(n) < np.where(hard, 0.9, 0.99)
    correct = np.stack([a, b, s], axis=1)
    cd = _cd(correct, agree_ab=a & b, folds=np.arange(n) % 5)
    probs = np.clip(np.stack([np.where(hard, 0.5, 0.95), np.where(hard, 0.4, 0.9), np.where(hard, 0.9, 0.97)], 1)
                    + rng.normal(0, 0.03, (n, 3)), 0.01, 0.99)
    return cd, probs


def test_policy_beats_the_strong_model_at_a_fraction_of_its_cost_on_synthetic_data():
    cd, probs = _synthetic()
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


def test_held_out_labels_never_choose_the_parameters():
    cd, probs = _synthetic()
    base = evaluate_strategy_policy(cd, probs, target="cost_fraction", cost_fraction=0.5)
    flipped = _cd(cd.data.correct.copy(), agree_ab=cd.agree[:, 0, 1].copy(), folds=cd.data.folds)
    test = cd.data.folds == 0
    flipped.data.correct[test] = ~flipped.data.correct[test]
    flipped.agree[test, 0, 1] = flipped.agree[test, 1, 0] = ~cd.agree[test, 0, 1]
    other = evaluate_strategy_policy(flipped, probs, target="cost_fraction", cost_fraction=0.5)
    assert other.params[0] == base.params[0]  # fold 0's λ comes from folds 1–4 only


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
    assert cd.latency[0, 0] == 1.5 and np.isnan(cd.latency[0, 1])
    with pytest.raises(ValueError, match="no recorded output"):
        CascadeData.from_outputs(outs[:2], {"x:0": ex}, pool, data)


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
