"""The strategy policy: per request, which strategy (a single model or an agreement cascade) to run.

    from training.policy import StrategyPolicy
    policy = StrategyPolicy.fit(models, menu, probs, outcome_correct, outcome_cost, lam=0.05)
    policy.choose(probs_batch)                 # index into the menu, per row (the offline evaluation)
    policy.strategy_for(probs_row)             # a Strategy with its fallbacks (the gateway)
    StrategyPolicy.from_json(policy.to_json())  # what router.json's strategy_policy holds

Each strategy on the menu gets its own estimate of P(its answer is right | the
router's probabilities): a logistic regression on the logits of the router's
per-model probabilities, fitted on recorded outcomes of that strategy (a
cascade's success depends on several models at once: two cheap models both
likely right means they will agree, and be right). The choice is RouterBench's
λ rule over strategies: argmax λ·P̂(s) − cost(s), where cost(s) is the
strategy's mean cost per query on the training rows (every call it made). The
menu, the regressions and λ are all fitted on training rows only
(`training.policy.fit`, which writes the deployable one, fitted on every
labelled query, into `router.json`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from training.policy.strategy import Strategy

EPS = 1e-4


def logits(probs: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(probs, dtype=float), EPS, 1 - EPS)
    return np.log(p / (1 - p))


@dataclass
class StrategyPolicy:
    models: list[str]
    menu: list[Strategy]
    mean: np.ndarray  # feature standardisation (m,)
    scale: np.ndarray  # (m,)
    coef: np.ndarray  # (s, m)
    intercept: np.ndarray  # (s,)
    costs: np.ndarray  # (s,) mean cost per query, USD
    lam: float
    c: float = 0.3  # the regressions' inverse regularisation

    def __post_init__(self) -> None:
        s, m = len(self.menu), len(self.models)
        if self.coef.shape != (s, m) or self.intercept.shape != (s,) or self.costs.shape != (s,):
            raise ValueError(f"strategy policy: shapes coef {self.coef.shape}, intercept {self.intercept.shape}, "
                             f"costs {self.costs.shape} do not fit {s} strategies over {m} models")
        unknown = sorted({x for st in self.menu for x in st.models} - set(self.models))
        if unknown:
            raise ValueError(f"strategy policy: the menu calls {unknown}, which are not among the router's models {self.models}")
        if not self.lam > 0:
            raise ValueError(f"strategy policy: lam must be > 0, got {self.lam}")

    # --- fitting -----------------------------------------------------------------
    @classmethod
    def fit(cls, models: Sequence[str], menu: Sequence[Strategy], probs: np.ndarray, correct: np.ndarray,
            cost: np.ndarray, *, lam: float = 1.0, c: float = 0.3) -> StrategyPolicy:
        """Regressions of each strategy's recorded correctness (rows × strategies) on the router's logits.
        `c` = 0 fits none: each strategy's success rate is its estimate, so the λ rule picks one strategy for
        every request (the right choice when the router's logits say nothing about which strategy succeeds)."""
        from sklearn.linear_model import LogisticRegression
        from threadpoolctl import threadpool_limits

        z = logits(probs)
        mean, scale = z.mean(axis=0), z.std(axis=0)
        scale = np.where(scale > 1e-9, scale, 1.0)
        x = (z - mean) / scale
        coef = np.zeros((len(menu), len(models)))
        intercept = np.zeros(len(menu))
        # One BLAS thread: these are small problems (rows × models), where a second thread only waits on the first
        # (13x slower per fit on a busy 2-core machine).
        with threadpool_limits(limits=1, user_api="blas"):
            for k in range(len(menu)):
                y = np.asarray(correct[:, k], dtype=bool)
                if c == 0 or y.all() or not y.any():  # c = 0, or one class: its rate (clipped) is the estimate
                    rate = np.clip(y.mean(), EPS, 1 - EPS)
                    intercept[k] = np.log(rate / (1 - rate))
                    continue
                lr = LogisticRegression(C=c, max_iter=2000).fit(x, y)
                coef[k], intercept[k] = lr.coef_[0], lr.intercept_[0]
        return cls(list(models), list(menu), mean, scale, coef, intercept, np.asarray(cost, float).mean(axis=0), lam, c)

    # --- deciding ----------------------------------------------------------------
    def success(self, probs: np.ndarray) -> np.ndarray:
        """P̂(strategy right) per row and strategy (n × s)."""
        x = (logits(np.atleast_2d(probs)) - self.mean) / self.scale
        return 1.0 / (1.0 + np.exp(-(x @ self.coef.T + self.intercept)))

    def choose(self, probs: np.ndarray, lam: float | None = None) -> np.ndarray:
        """The λ rule over strategies: index into the menu per row."""
        lam = self.lam if lam is None else lam
        return np.argmax(lam * self.success(probs) - self.costs[None, :], axis=1)

    def strategy_for(self, probs: Sequence[float], allowed: set[str] | frozenset[str] | None = None,
                     max_cost_usd: float | None = None) -> tuple[Strategy, dict] | None:
        """The strategy to run for one request, with its fallbacks, and why (for the trace).

        `allowed` (a caller's allowed_models) drops strategies that would call any other model;
        `max_cost_usd` drops those whose mean cost is above it. None when nothing is left (the
        caller keeps the single-model decision). Escalation falls back to the remaining models,
        most probable first.
        """
        p = np.asarray(probs, dtype=float)
        succ = self.success(p)[0]
        util = self.lam * succ - self.costs
        ok = [k for k, st in enumerate(self.menu) if (allowed is None or set(st.models) <= allowed)
              and (max_cost_usd is None or self.costs[k] <= max_cost_usd)]
        if not ok:
            return None
        k = max(ok, key=lambda i: (util[i], -self.costs[i]))
        st = self.menu[k]
        by_p = [self.models[j] for j in np.argsort(-p, kind="stable")]
        rest = tuple(x for x in by_p if x not in st.models and (allowed is None or x in allowed))
        st = replace(st, escalate=(*st.escalate, *rest))  # every kind's fallbacks follow its escalate
        why = {"rule": "strategy_lambda", "lam": self.lam, "estimated_success": float(succ[k]),
               "expected_cost_usd": float(self.costs[k]), "menu_size": len(self.menu)}
        return st, why

    # --- files -------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"models": self.models, "menu": [s.to_dict() for s in self.menu], "mean": self.mean.tolist(),
                "scale": self.scale.tolist(), "coef": self.coef.tolist(), "intercept": self.intercept.tolist(),
                "costs": self.costs.tolist(), "lam": self.lam, "c": self.c,
                "rule": "argmax lam * P(strategy right | router logits) - mean cost of the strategy"}

    @classmethod
    def from_json(cls, d: dict, *, source: str = "strategy policy") -> StrategyPolicy:
        try:
            return cls(list(d["models"]), [Strategy.from_dict(s) for s in d["menu"]], np.asarray(d["mean"], float),
                       np.asarray(d["scale"], float), np.asarray(d["coef"], float), np.asarray(d["intercept"], float),
                       np.asarray(d["costs"], float), float(d["lam"]), float(d.get("c", 0.3)))
        except KeyError as e:
            raise ValueError(f"{source}: missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: {e}") from None
