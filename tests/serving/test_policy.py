import numpy as np
import pytest

from serving.policy import (
    Constraints,
    CostAwarePolicy,
    NoEligibleModel,
    choose_batch,
    choose_batch_lambda,
    estimate_request_cost,
)

MODELS = ["big", "mid", "small"]
COSTS = {"big": 0.010, "mid": 0.002, "small": 0.0005}


def policy(t=0.5):
    return CostAwarePolicy(models=MODELS, costs=COSTS, threshold=t)


def test_cheapest_confident_model_wins():
    d = policy().decide([0.9, 0.8, 0.3])
    assert d.chosen == "mid" and d.rule == "cheapest_confident"
    # confident models cheapest first, then the rest by probability
    assert d.ranking == ["mid", "big", "small"]
    assert d.probabilities["small"] == pytest.approx(0.3) and d.costs["big"] == 0.010


def test_threshold_is_strict_and_falls_back_to_most_probable():
    d = policy().decide([0.5, 0.4, 0.45])
    assert d.rule == "most_probable" and d.chosen == "big"
    assert d.ranking == ["big", "small", "mid"]


def test_constraints():
    p = policy()
    d = p.decide([0.9, 0.8, 0.7], Constraints(allowed_models=frozenset({"big", "mid"})))
    assert d.chosen == "mid" and d.excluded == {"small": "not in allowed_models"}
    d = p.decide([0.9, 0.8, 0.7], Constraints(max_cost_usd=0.001))
    assert d.chosen == "small" and set(d.excluded) == {"big", "mid"}
    d = p.decide([0.9, 0.8, 0.7], Constraints(min_probability=0.85))
    assert d.chosen == "big" and d.threshold == 0.85
    with pytest.raises(NoEligibleModel, match="no model"):
        p.decide([0.9, 0.8, 0.7], Constraints(max_cost_usd=0.0001))


def test_request_costs_replace_profile():
    d = policy().decide([0.9, 0.9, 0.9], request_costs={"big": 0.0001, "mid": 0.002, "small": 0.001})
    assert d.chosen == "big"


def test_lambda_rule():
    d = policy().decide([0.95, 0.6, 0.5], rule="lambda", lam=0.01)
    # utilities: big .0095-.01=-.0005, mid .006-.002=.004, small .005-.0005=.0045
    assert d.chosen == "small" and d.rule == "lambda"
    assert policy().decide([0.95, 0.6, 0.5], rule="lambda", lam=1.0).chosen == "big"


def test_batch_rules_agree_with_decide():
    rng = np.random.default_rng(0)
    probs = rng.random((200, 3))
    costs = np.array([COSTS[m] for m in MODELS])
    p = policy(0.6)
    assert [MODELS[i] for i in choose_batch(probs, costs, 0.6)] == [p.decide(r).chosen for r in probs]
    assert [MODELS[i] for i in choose_batch_lambda(probs, costs, 0.05)] == [
        p.decide(r, rule="lambda", lam=0.05).chosen for r in probs
    ]


def test_bad_inputs():
    with pytest.raises(ValueError, match="no profiled cost"):
        CostAwarePolicy(models=["x"], costs={})
    with pytest.raises(ValueError, match="3 probabilities"):
        policy().decide([0.1, 0.2])
    assert estimate_request_cost(1000, 1.0, 2.0, 500) == pytest.approx(0.002)


def test_lambda_as_the_policys_default_rule():
    p = CostAwarePolicy(models=MODELS, costs=COSTS, rule="lambda", lam=0.01)
    assert p.decide([0.95, 0.6, 0.5]).chosen == "small" and p.decide([0.95, 0.6, 0.5]).rule == "lambda"
    assert p.decide([0.95, 0.6, 0.5], lam=1.0).chosen == "big"
    # an explicit per-request threshold (the gateway's router-<τ>) asks for the threshold rule
    d = p.decide([0.9, 0.8, 0.3], threshold=0.5)
    assert d.rule == "cheapest_confident" and d.chosen == "mid"
    with pytest.raises(ValueError, match="needs lam"):
        CostAwarePolicy(models=MODELS, costs=COSTS, rule="lambda")
    with pytest.raises(ValueError, match="rule must be"):
        CostAwarePolicy(models=MODELS, costs=COSTS, rule="greedy")


def test_router_json_and_the_deployment_choose_the_rule():
    from serving.client import policy_from_info

    info = {"models": MODELS, "cost_profile": COSTS, "threshold": 0.5}
    assert policy_from_info(info).rule == "threshold"
    p = policy_from_info({**info, "policy": {"rule": "lambda", "lam": 0.01}})
    assert (p.rule, p.lam) == ("lambda", 0.01) and p.decide([0.95, 0.6, 0.5]).chosen == "small"
    with pytest.raises(ValueError, match="needs lam"):
        policy_from_info({**info, "policy": {"rule": "lambda"}})


def test_lambda_rule_keeps_the_callers_min_probability():
    p = CostAwarePolicy(models=MODELS, costs=COSTS, rule="lambda", lam=0.01)
    # λ alone picks small (0.5); the caller asks for p ≥ 0.6: mid is the best utility among big and mid
    d = p.decide([0.95, 0.6, 0.5], Constraints(min_probability=0.6))
    assert d.chosen == "mid" and d.ranking == ["mid", "big", "small"]
    # nobody reaches it: most probable first, as the threshold rule falls back
    assert p.decide([0.3, 0.2, 0.1], Constraints(min_probability=0.9)).ranking == ["big", "mid", "small"]
