"""The cost-aware selection policy: which model answers this request.

The Switchcraft rule: among the models whose predicted probability of being
exactly right exceeds a threshold τ, pick the one with the lowest profiled
cost; if none does, pick the most probable. The profiled cost is the model's
mean *real* cost per query measured on training data (input + output +
reasoning tokens × its prices), not its list price: verbose models cost far
more than their list price suggests.

    from serving.policy import CostAwarePolicy, Constraints
    policy = CostAwarePolicy(models=["a", "b"], costs={"a": 0.002, "b": 0.0004}, threshold=0.5)
    decision = policy.decide([0.9, 0.7])       # → "b": confident and cheaper
    decision.ranking                           # fallback order if "b" fails upstream

A second rule, RouterBench's λ policy, maximises λ·p − cost (`rule="lambda"`).
Both are used by the evaluation sweeps and by the gateway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from training.policy import Strategy

Rule = Literal["cheapest_confident", "most_probable", "lambda"]


@dataclass(frozen=True)
class Constraints:
    """What a caller may ask of one decision."""

    allowed_models: frozenset[str] | None = None
    max_cost_usd: float | None = None  # per request
    min_probability: float | None = None  # overrides the threshold upwards

    def __post_init__(self) -> None:
        if self.max_cost_usd is not None and self.max_cost_usd < 0:
            raise ValueError("max_cost_usd must be ≥ 0")
        if self.min_probability is not None and not 0 <= self.min_probability <= 1:
            raise ValueError("min_probability must be within [0, 1]")


@dataclass
class Decision:
    """The whole decision: the choice, every input to it, and the rule that fired."""

    chosen: str
    rule: str
    threshold: float
    probabilities: dict[str, float]
    costs: dict[str, float]
    ranking: list[str]  # the chosen model first, then the fallback order
    excluded: dict[str, str] = field(default_factory=dict)  # model -> why it was not eligible
    # What to run: single(chosen) with the ranking as fallbacks, unless a strategy policy chose a cascade.
    strategy: Strategy | None = None
    strategy_why: dict | None = None  # set when a strategy policy chose the strategy (training.policy.StrategyPolicy)
    lam: float | None = None  # the λ of rule "lambda"
    novelty: dict | None = None  # how unlike the training requests, and whether it went to the safe model

    def __post_init__(self) -> None:
        if self.strategy is None:
            self.strategy = Strategy.single(self.chosen, tuple(self.ranking[1:]))

    def accepts(self, model: str, stay_usd: float, switch_usd: float) -> bool:
        """Whether this decision's own rule would accept `model` in place of `chosen`, with `stay_usd` the cost of
        running `model` and `switch_usd` that of running `chosen` (a session's cache priced into each): under the
        threshold rule only a model above τ (or, where none is, one as probable as the chosen); under the λ rule
        only where λ·p − cost is no worse than the chosen model's."""
        p = self.probabilities
        if self.rule == "cheapest_confident":
            return p.get(model, 0.0) > self.threshold
        if self.rule == "lambda" and self.lam is not None:
            return self.lam * p.get(model, 0.0) - stay_usd >= self.lam * p[self.chosen] - switch_usd
        return p.get(model, 0.0) >= p.get(self.chosen, 0.0)

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy.to_dict(),
            **({"strategy_why": self.strategy_why} if self.strategy_why else {}),
            **({"novelty": self.novelty} if self.novelty else {}),
            "chosen": self.chosen,
            "rule": self.rule,
            "threshold": self.threshold,
            "probabilities": self.probabilities,
            "costs": self.costs,
            "ranking": self.ranking,
            "excluded": self.excluded,
        }


class NoEligibleModel(ValueError):
    """Constraints left no model to choose from."""


@dataclass
class CostAwarePolicy:
    models: Sequence[str]
    costs: Mapping[str, float]  # profiled mean cost per query, USD
    threshold: float = 0.5
    # The default rule of `decide`: "threshold" (the paper's) or "lambda" (argmax lam·p − cost,
    # lam calibrated with `switchcraft evaluate`; it beat the threshold rule on BFCL v1).
    rule: Literal["threshold", "lambda"] = "threshold"
    lam: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in ("threshold", "lambda"):
            raise ValueError(f"rule must be 'threshold' or 'lambda', got {self.rule!r}")
        if self.rule == "lambda" and (self.lam is None or not self.lam > 0):
            raise ValueError(f"rule 'lambda' needs lam > 0, got {self.lam!r}")
        missing = [m for m in self.models if m not in self.costs]
        if missing:
            raise ValueError(f"no profiled cost for {missing}; profile them (switchcraft pool profile) or drop them")
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"threshold must be within [0, 1], got {self.threshold}")
        self._cost_vec = np.array([self.costs[m] for m in self.models], dtype=float)

    def decide(
        self,
        probabilities: Sequence[float] | np.ndarray,
        constraints: Constraints | None = None,
        *,
        request_costs: Mapping[str, float] | None = None,
        threshold: float | None = None,
        rule: Literal["threshold", "lambda"] | None = None,
        lam: float | None = None,
    ) -> Decision:
        """Choose for one request.

        `request_costs` (optional) replaces the profiled cost with a
        per-request estimate (`estimate_request_cost`). With `rule="lambda"`,
        the choice maximises `lam·p − cost` instead. `rule` defaults to the
        policy's own, except that an explicit `threshold` asks for the threshold rule.
        """
        if rule is None:
            rule = "threshold" if threshold is not None else self.rule
        if rule == "lambda" and lam is None:
            lam = self.lam
        probs = np.asarray(probabilities, dtype=float)
        if probs.shape != (len(self.models),):
            raise ValueError(f"expected {len(self.models)} probabilities (pool order {list(self.models)}), got shape {probs.shape}")
        c = constraints or Constraints()
        tau = self.threshold if threshold is None else threshold
        if c.min_probability is not None:
            tau = max(tau, c.min_probability)
        costs = {m: float((request_costs or self.costs)[m]) for m in self.models}
        excluded: dict[str, str] = {}
        for m in self.models:
            if c.allowed_models is not None and m not in c.allowed_models:
                excluded[m] = "not in allowed_models"
            elif c.max_cost_usd is not None and costs[m] > c.max_cost_usd:
                excluded[m] = f"cost {costs[m]:.6f} > cap {c.max_cost_usd:.6f}"
        eligible = [i for i, m in enumerate(self.models) if m not in excluded]
        if not eligible:
            raise NoEligibleModel(f"no model satisfies the constraints: {excluded}")
        p = {m: float(probs[i]) for i, m in enumerate(self.models)}

        if rule == "lambda":
            if lam is None:
                raise ValueError("rule='lambda' needs lam")
            utility = {self.models[i]: lam * probs[i] - costs[self.models[i]] for i in eligible}
            # A caller's min_probability holds under this rule too: models below it come last, most probable first.
            floor = c.min_probability if c.min_probability is not None else -np.inf
            sure = [m for m in utility if p[m] >= floor]
            ranking = (sorted(sure, key=lambda m: (-utility[m], costs[m], m))
                       + sorted((m for m in utility if p[m] < floor), key=lambda m: (-p[m], costs[m], m)))
            fired = "lambda"
        else:
            confident = [self.models[i] for i in eligible if probs[i] > tau]
            rest = [self.models[i] for i in eligible if probs[i] <= tau]
            # Confident models cheapest first, then the others most probable first.
            ranking = sorted(confident, key=lambda m: (costs[m], -p[m], m)) + sorted(rest, key=lambda m: (-p[m], costs[m], m))
            fired = "cheapest_confident" if confident else "most_probable"
        return Decision(
            chosen=ranking[0], rule=fired, threshold=tau, probabilities=p, costs=costs, ranking=ranking, excluded=excluded,
            lam=float(lam) if rule == "lambda" else None,
        )


def choose_batch(probs: np.ndarray, costs: np.ndarray, threshold: float) -> np.ndarray:
    """Vectorised cheapest-confident rule over a batch (n × models) → chosen column per row.

    Same rule as `CostAwarePolicy.decide` without constraints; used by the
    evaluation sweeps, where thousands of decisions per threshold are made.
    """
    probs = np.asarray(probs, dtype=float)
    confident = probs > threshold
    big = np.where(confident, costs[None, :], np.inf)
    cheapest = np.argmin(big, axis=1)
    # Ties on cost: argmin takes the first; fine since pool costs differ in practice.
    most_probable = np.argmax(probs, axis=1)
    return np.where(confident.any(axis=1), cheapest, most_probable)


def choose_batch_lambda(probs: np.ndarray, costs: np.ndarray, lam: float) -> np.ndarray:
    """Vectorised λ rule: argmax of λ·p − cost per row."""
    return np.argmax(lam * np.asarray(probs, dtype=float) - costs[None, :], axis=1)


def estimate_request_cost(input_tokens: int, input_per_mtok: float, output_per_mtok: float, typical_output_tokens: float) -> float:
    """This request's input tokens × price + the model's typical output × price (USD)."""
    if input_tokens < 0 or typical_output_tokens < 0:
        raise ValueError("token counts must be ≥ 0")
    return (input_tokens * input_per_mtok + typical_output_tokens * output_per_mtok) / 1e6
