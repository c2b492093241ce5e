"""A routing decision as a *strategy*: one model, or an agreement cascade.

    from training.policy import Strategy
    Strategy.single("gpt-4o-mini")                                   # one model (its fallbacks after it)
    Strategy.agree("gpt-4o-mini", "gemini-1.5-flash", escalate=("claude-3-5-sonnet",))
    Strategy.agree("a", "b", tie_breaker="c", escalate=("d", "e"))  # d first, e if d fails
    Strategy.agree("a", "b", escalate=("d",), resolve={"first_declines": "first"})  # a rule for one kind

What a strategy is (its models, its resolve rules, its JSON in `router.json`); what it does with the answers
it gets is `training.policy.rules`, the one copy the gateway, the offline simulation and the replay of
logged traffic all follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from data.verify.agree import DISAGREEMENT_KINDS

RESOLVE_ACTIONS = ("first", "second", "escalate")


@dataclass(frozen=True)
class Strategy:
    first: tuple[str, ...]  # one model (single) or two (called concurrently)
    tie_breaker: str | None = None
    escalate: tuple[str, ...] = ()  # on disagreement, in order; for a single: its fallbacks
    resolve: tuple[tuple[str, str], ...] = ()  # (disagreement kind, action), sorted: what to do without asking more

    def __post_init__(self) -> None:
        if len(self.first) not in (1, 2):
            raise ValueError(f"a strategy calls one model or two at first, got {list(self.first)}")
        if len(set(self.first)) != len(self.first):
            raise ValueError(f"an agreement needs two different models, got {list(self.first)}")
        if self.tie_breaker is not None and (len(self.first) != 2 or self.tie_breaker in self.first):
            raise ValueError("a tie-breaker needs two first models and must differ from them")
        if len(self.first) == 2 and not self.escalate:
            raise ValueError(f"agree({', '.join(self.first)}) needs a model to escalate to")
        if self.resolve and len(self.first) != 2:
            raise ValueError("resolve rules apply to an agreement of two models, not to a single model")
        for kind, action in self.resolve:
            if kind not in DISAGREEMENT_KINDS:
                raise ValueError(f"resolve: unknown disagreement kind {kind!r} (kinds: {', '.join(DISAGREEMENT_KINDS)})")
            if action not in RESOLVE_ACTIONS:
                raise ValueError(f"resolve[{kind}]: unknown action {action!r} (actions: {', '.join(RESOLVE_ACTIONS)})")
        if len({k for k, _ in self.resolve}) != len(self.resolve):
            raise ValueError("resolve: one rule per disagreement kind")
        object.__setattr__(self, "resolve", tuple(sorted(self.resolve, key=lambda r: DISAGREEMENT_KINDS.index(r[0]))))

    @classmethod
    def single(cls, model: str, fallbacks: tuple[str, ...] = ()) -> Strategy:
        return cls((model,), None, tuple(fallbacks))

    @classmethod
    def agree(cls, a: str, b: str, *, tie_breaker: str | None = None, escalate: tuple[str, ...],
              resolve: Mapping[str, str] | None = None) -> Strategy:
        return cls((a, b), tie_breaker, tuple(escalate), tuple((resolve or {}).items()))

    def action_for(self, kind: str | None) -> str | None:
        """The rule for a disagreement of this kind (None: no rule, go on to the tie-breaker / escalation)."""
        return dict(self.resolve).get(kind) if kind else None

    @property
    def kind(self) -> str:
        return "single" if len(self.first) == 1 else "agree"

    @property
    def models(self) -> tuple[str, ...]:
        """Every model the strategy may call, in the order it would."""
        seen: list[str] = []
        for m in (*self.first, *((self.tie_breaker,) if self.tie_breaker else ()), *self.escalate):
            if m not in seen:
                seen.append(m)
        return tuple(seen)

    @property
    def name(self) -> str:
        if self.kind == "single":
            return f"single({self.first[0]})"
        tb = f", {self.tie_breaker}" if self.tie_breaker else ""
        rules = "; " + ", ".join(f"{k}: {a}" for k, a in self.resolve) if self.resolve else ""
        return f"agree({self.first[0]}, {self.first[1]}{tb} → {self.escalate[0]}{rules})"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "first": list(self.first), "tie_breaker": self.tie_breaker,
                "escalate": list(self.escalate), "resolve": dict(self.resolve)}

    @classmethod
    def from_dict(cls, d: dict) -> Strategy:
        try:
            resolve = d.get("resolve") or {}
            if not isinstance(resolve, Mapping):
                raise ValueError(f"a strategy's resolve is a mapping of disagreement kind to action, got {resolve!r}")
            return cls(tuple(d["first"]), d.get("tie_breaker"), tuple(d.get("escalate") or ()), tuple(resolve.items()))
        except KeyError as e:
            raise ValueError(f"a strategy needs {e.args[0]!r} (got keys {sorted(d)})") from None
