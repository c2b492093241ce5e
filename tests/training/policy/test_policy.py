"""StrategyPolicy: the λ rule over strategies, its file form, and its errors."""

import numpy as np
import pytest

from training.policy import Strategy, StrategyPolicy

MODELS = ["a", "b", "c"]
MENU = [Strategy.single("a"), Strategy.agree("a", "b", escalate=("c",)), Strategy.single("c")]


def _fitted(lam=1.0):
    rng = np.random.default_rng(0)
    probs = rng.uniform(0.05, 0.95, (300, 3))
    # Strategy k is right when model k's probability is high: the regressions must find it.
    correct = np.stack([rng.random(300) < probs[:, 0], rng.random(300) < (probs[:, 0] + probs[:, 1]) / 2,
                        rng.random(300) < 0.97], axis=1)
    cost = np.tile([1.0, 2.5, 10.0], (300, 1))
    return StrategyPolicy.fit(MODELS, MENU, probs, correct, cost, lam=lam)


def test_success_follows_the_probabilities_and_lambda_trades_cost():
    pol = _fitted()
    hi, lo = pol.success(np.array([[0.95, 0.9, 0.5]]))[0], pol.success(np.array([[0.1, 0.1, 0.5]]))[0]
    assert hi[0] > lo[0] and hi[1] > lo[1]
    assert pol.costs.tolist() == [1.0, 2.5, 10.0]
    assert pol.choose(np.array([[0.95, 0.9, 0.5]]), lam=0.1)[0] == 0  # cost dominates: the cheapest
    assert pol.choose(np.array([[0.1, 0.1, 0.5]]), lam=1e4)[0] == 2  # accuracy dominates: the strong one


def test_round_trip_and_strategy_for_adds_fallbacks():
    pol = _fitted(lam=1e4)
    again = StrategyPolicy.from_json(pol.to_json())
    x = np.array([[0.2, 0.3, 0.9]])
    assert np.allclose(again.success(x), pol.success(x))
    st, why = again.strategy_for(x[0])
    assert st == Strategy.single("c", ("b", "a")) and why["rule"] == "strategy_lambda"
    st, _ = again.strategy_for(x[0], allowed={"a", "b"})
    assert set(st.models) <= {"a", "b"}
    assert again.strategy_for(x[0], max_cost_usd=0.5) is None


def test_errors_name_what_is_wrong():
    d = _fitted().to_json()
    with pytest.raises(ValueError, match="missing field 'lam'"):
        StrategyPolicy.from_json({k: v for k, v in d.items() if k != "lam"})
    with pytest.raises(ValueError, match="not among the router's models"):
        StrategyPolicy.from_json({**d, "models": ["a", "b", "x"]})
    with pytest.raises(ValueError, match="do not fit"):
        StrategyPolicy.from_json({**d, "costs": [1.0]})
