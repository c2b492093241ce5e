"""single(m): one model, then its fallbacks (`escalate`) one at a time while they fail.

    Strategy.single("gpt-4o-mini", ("gemini-1.5-flash",))   # name: single(gpt-4o-mini)

Offline every model answers, so the run is the model's one call. The gateway asks the model, then each
fallback while the previous one failed (at most `upstream.max_attempts` calls; with `upstream.hedge_after_s`
the second is also asked when the first is that slow), and a request the upstream rejects goes back to the
caller.
"""

from __future__ import annotations

from collections.abc import Mapping
import numpy as np

from training.policy.kinds.base import Answers, Executor, Path, StrategyKind, StrategyRoles


class Single(StrategyKind):
    name = "single"
    one_at_a_time = True
    answers_as_written = True

    def check(self, s: StrategyRoles) -> None:
        if len(s.first) != 1:
            raise ValueError(f"single calls one model first, got {list(s.first)}")
        if s.tie_breaker is not None:
            raise ValueError("a tie-breaker needs two first models and must differ from them")
        if s.resolve:
            raise ValueError("resolve rules apply to an agreement of two models, not to a single model")

    def title(self, s: StrategyRoles) -> str:
        return f"single({s.first[0]})"

    def walk(self, s: StrategyRoles, answers: Answers, price: Mapping[str, float]) -> Path:
        return Path((s.first[0],), s.first[0])

    def simulate(self, cd, s: StrategyRoles, price: Mapping[str, float], memo: dict | None = None) -> tuple:
        d = cd.data
        j = {m: j for j, m in enumerate(d.models)}[s.first[0]]
        n = len(d.correct)
        return d.correct[:, j], d.cost[:, j], cd.latency[:, j], np.ones(n, int), np.zeros(n, bool)

    async def execute(self, s: StrategyRoles, ex: Executor) -> None:
        await ex.fallbacks(s.models)
