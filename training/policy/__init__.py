"""The strategy policy: the strategies a request may run, their kinds, their simulation, the fit.

    from training.policy import Strategy, StrategyPolicy, write_strategy_policy
    write_strategy_policy("runs/default/router", cd, oof_probs)   # the policy into router.json

- `strategy.py`: a Strategy (its kind, and the models it gives each role: first, tie-breaker, escalate, resolve);
- `kinds/`: one class per kind of strategy (`single`, `agree`: its checks, name, first step, offline run, live
  run), registered by name; the one copy the gateway (`serving/gateway/cascade.py`), the budget, the simulation
  and the replay all follow;
- `simulate.py`: every strategy run on the recordings, vectorised over queries (`CascadeData`, `simulate`);
- `replay.py`: a strategy run on logged answers (`switchcraft learn`'s comparison);
- `policy.py`: `StrategyPolicy`, per request the strategy to run (λ rule over per-strategy success regressions);
- `fit.py`: the menu, the regressions and λ fitted, and written into `router.json`.
"""

from __future__ import annotations

from typing import Any

from training.policy.policy import StrategyPolicy
from training.policy.strategy import RESOLVE_ACTIONS, Strategy

__all__ = ["RESOLVE_ACTIONS", "Strategy", "StrategyPolicy", "write_strategy_policy"]


def __getattr__(name: str) -> Any:
    # Lazy: the gateway imports Strategy; the fit (scikit-learn) loads only when asked for.
    if name == "write_strategy_policy":
        from training.policy.fit import write_strategy_policy

        return write_strategy_policy
    raise AttributeError(f"module 'training.policy' has no attribute {name!r}")
