"""The Strategy type for serving's modules: defined, with the cascade's rules, in `training.policy`.

    from serving.strategy import Strategy      # the same class as training.policy.Strategy
"""

from __future__ import annotations

from training.policy.strategy import RESOLVE_ACTIONS, Strategy

__all__ = ["RESOLVE_ACTIONS", "Strategy"]
