import numpy as np
import pytest

from data.schema import Label
from evaluation.offline.routing_eval import RoutingData, choose_tau, evaluate_router, per_category, references
from evaluation.offline.routing_metrics import (
    Outcome,
    aiq,
    apgr,
    gap_closed,
    nondecreasing_hull,
    oracle_choice,
    outcome_of,
    savings,
)

# 4 queries × 3 models: "big" right on all, "mid" on q0,q1,q2, "small" on q0 only.
CORRECT = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]], dtype=bool)
COST = np.array([[10.0, 2.0, 1.0]] * 4)


def test_outcome_and_oracle():
    assert outcome_of(np.array([0, 1, 2, 0]), CORRECT, COST) == Outcome(0.75, (10 + 2 + 1 + 10) / 4)
    # cheapest correct: small, mid, mid, big
    assert oracle_choice(CORRECT, COST).tolist() == [2, 1, 1, 0]
    none_right = np.zeros((1, 3), dtype=bool)
    assert oracle_choice(none_right, COST[:1]).tolist() == [2]  # nobody right: cheapest


def test_gap_and_savings():
    best, oracle = Outcome(0.8, 10.0), Outcome(0.9, 1.0)
    assert gap_closed(Outcome(0.85, 2.0), best, oracle) == pytest.approx(0.5)
    assert savings(Outcome(0.85, 2.0), best) == pytest.approx(0.8)
    assert np.isnan(gap_closed(Outcome(0.85, 2.0), best, Outcome(0.8, 1.0)))


def test_hull_drops_dominated_and_concave_points():
    c = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    a = np.array([0.5, 0.55, 0.9, 0.8, 0.95])
    hc, ha = nondecreasing_hull(c, a)
    # (2, .55) lies under the segment (1,.5)-(3,.9); (4,.8) is dominated.
    assert hc.tolist() == [1.0, 3.0, 5.0] and ha.tolist() == [0.5, 0.9, 0.95]


def test_aiq_of_a_flat_router_is_its_accuracy():
    assert aiq(np.array([0.0, 1.0]), np.array([0.7, 0.7]), 0.0, 1.0) == pytest.approx(0.7)
    # a single point at the middle: 0 below it, its accuracy above
    assert aiq(np.array([0.5]), np.array([0.8]), 0.0, 1.0) == pytest.approx(0.4, abs=1e-3)


def test_apgr_bounds():
    weak, strong = Outcome(0.5, 1.0), Outcome(0.9, 3.0)
    # a router at the strong model's accuracy already at the weak cost recovers everything
    assert apgr(np.array([1.0, 3.0]), np.array([0.9, 0.9]), weak, strong) == pytest.approx(1.0)
    # a router on the straight line between the two recovers half on average
    assert apgr(np.array([1.0, 3.0]), np.array([0.5, 0.9]), weak, strong) == pytest.approx(0.5, abs=1e-3)


def _data(n_folds=2):
    rng = np.random.default_rng(1)
    n = 40
    correct = np.zeros((n, 3), dtype=bool)
    correct[:, 0] = rng.random(n) < 0.9
    correct[:, 1] = rng.random(n) < 0.7
    correct[:, 2] = rng.random(n) < 0.4
    cost = np.tile([10.0, 2.0, 1.0], (n, 1)) * rng.uniform(0.9, 1.1, (n, 1))
    return RoutingData([f"t:{i}" for i in range(n)], np.array(["a", "b"] * (n // 2)), ["big", "mid", "small"],
                       correct, cost, np.arange(n) % n_folds)


def test_perfect_router_matches_oracle():
    d = _data()
    d.correct[~d.correct.any(axis=1), 0] = True  # where nobody is right the oracle takes the cheapest
    perfect = d.correct.astype(float)  # P(correct) = the truth
    r = evaluate_router("perfect", perfect, d, fixed_tau=0.5)
    refs = references(d)
    assert r.outcome.accuracy == pytest.approx(refs.oracle.accuracy)
    assert r.outcome.mean_cost_usd == pytest.approx(refs.oracle.mean_cost_usd)
    assert refs.best_single.outcome.accuracy == refs.singles["big"].accuracy
    assert len(r.curve) == 101 and len(r.lambda_curve) > 100


def test_calibrated_tau_comes_from_training_folds_only():
    d = _data()
    probs = np.clip(d.correct + np.random.default_rng(2).normal(0, 0.3, d.correct.shape), 0, 1)
    r = evaluate_router("noisy", probs, d)
    for k, tau in r.taus.items():
        train = d.folds != k
        costs = d.cost[train].mean(axis=0)
        assert tau == choose_tau(probs[train], d.correct[train], d.cost[train], costs, target="match_best")
    cats = per_category({"router": r.choice}, d)
    assert set(cats) == {"a", "b"} and cats["a"]["n"] == 20


def test_from_labels_requires_cost_and_full_pool():
    labels = [Label(example_id="t:0", model="a", correct=True, reason="ok", cost_usd=1.0)]
    with pytest.raises(ValueError, match="no label"):
        RoutingData.from_labels(labels, None, ["a", "b"], {"t:0": 0})
    labels.append(Label(example_id="t:0", model="b", correct=False, reason="x", cost_usd=None))
    with pytest.raises(ValueError, match="without any recorded cost"):
        RoutingData.from_labels(labels, None, ["a", "b"], {"t:0": 0})
    labels += [Label(example_id="t:1", model="a", correct=True, reason="ok", cost_usd=3.0),
               Label(example_id="t:1", model="b", correct=True, reason="ok", cost_usd=2.0)]
    d = RoutingData.from_labels(labels, None, ["a", "b"], {"t:0": 0, "t:1": 1})
    assert d.cost[0, 1] == 2.0 and d.imputed_costs == {"b": 1}  # the model's mean known cost


def test_cost_fraction_target_stays_within_budget_on_training_rows():
    d = _data()
    probs = np.clip(d.correct + np.random.default_rng(3).normal(0, 0.3, d.correct.shape), 0, 1)
    costs = d.cost.mean(axis=0)
    tau = choose_tau(probs, d.correct, d.cost, costs, target="cost_fraction", cost_fraction=0.3)
    from evaluation.offline.routing_metrics import best_single_column
    from serving.policy import choose_batch

    best_cost = d.cost[:, best_single_column(d.correct, d.cost)].mean()
    chosen = outcome_of(choose_batch(probs, costs, tau), d.correct, d.cost)
    assert chosen.mean_cost_usd <= 0.3 * best_cost
    with pytest.raises(ValueError, match="unknown target"):
        choose_tau(probs, d.correct, d.cost, costs, target="nope")


def test_lambda_rule_is_calibrated_like_tau_and_respects_the_budget():
    d = _data()
    probs = np.clip(d.correct + np.random.default_rng(4).normal(0, 0.3, d.correct.shape), 0, 1)
    costs = d.cost.mean(axis=0)
    from evaluation.offline.routing_eval import LAMBDA_GRID
    from evaluation.offline.routing_metrics import best_single_column
    from serving.policy import choose_batch_lambda

    lam = choose_tau(probs, d.correct, d.cost, costs, target="cost_fraction", cost_fraction=0.3, rule="lambda")
    assert lam in LAMBDA_GRID
    best_cost = d.cost[:, best_single_column(d.correct, d.cost)].mean()
    assert outcome_of(choose_batch_lambda(probs, costs, lam), d.correct, d.cost).mean_cost_usd <= 0.3 * best_cost
    r = evaluate_router("noisy", probs, d, target="cost_fraction", rule="lambda")
    assert r.rule == "lambda"
    for k, v in r.taus.items():
        train = d.folds != k
        assert v == choose_tau(probs[train], d.correct[train], d.cost[train], d.cost[train].mean(axis=0),
                               target="cost_fraction", rule="lambda")
        assert (r.choice[d.folds == k] == choose_batch_lambda(probs[d.folds == k], d.cost[train].mean(axis=0), v)).all()
    with pytest.raises(ValueError, match="unknown rule"):
        choose_tau(probs, d.correct, d.cost, costs, target="match_best", rule="nope")
