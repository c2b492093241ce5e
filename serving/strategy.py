"""A routing decision as a *strategy*: one model, or an agreement cascade.

    from serving.strategy import Strategy
    Strategy.single("gpt-4o-mini")                                   # today's decision
    Strategy.agree("gpt-4o-mini", "gemini-1.5-flash", escalate=("claude-3-5-sonnet",))
    Strategy.agree("a", "b", tie_breaker="c", escalate=("d", "e"))  # d first, e if d fails

How an agreement cascade runs (offline on recordings in `evaluation.strategy_eval`,
online in the gateway), the same rules in both places:

1. call `first` (two models) concurrently;
2. if their decoded calls agree in meaning (`data.verify.agree.calls_agree`;
   two non-calls agree), answer with the cheaper one's answer;
3. otherwise, if there is a tie-breaker, call it; if it agrees with one of the
   first two, answer with the cheaper model of that agreeing pair;
4. otherwise answer with the first of `escalate`: if it was already called
   (it is one of the first models), its answer is reused at no extra cost; a
   model that fails upstream is skipped like today's fallback.

A model that fails mid-cascade gives no answer: it agrees with nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    first: tuple[str, ...]  # one model (single) or two (called concurrently)
    tie_breaker: str | None = None
    escalate: tuple[str, ...] = ()  # on disagreement, in order; for a single: its fallbacks

    def __post_init__(self) -> None:
        if len(self.first) not in (1, 2):
            raise ValueError(f"a strategy calls one model or two at first, got {list(self.first)}")
        if len(set(self.first)) != len(self.first):
            raise ValueError(f"an agreement needs two different models, got {list(self.first)}")
        if self.tie_breaker is not None and (len(self.first) != 2 or self.tie_breaker in self.first):
            raise ValueError("a tie-breaker needs two first models and must differ from them")
        if len(self.first) == 2 and not self.escalate:
            raise ValueError(f"agree({', '.join(self.first)}) needs a model to escalate to")

    @classmethod
    def single(cls, model: str, fallbacks: tuple[str, ...] = ()) -> Strategy:
        return cls((model,), None, tuple(fallbacks))

    @classmethod
    def agree(cls, a: str, b: str, *, tie_breaker: str | None = None, escalate: tuple[str, ...]) -> Strategy:
        return cls((a, b), tie_breaker, tuple(escalate))

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
        return f"agree({self.first[0]}, {self.first[1]}{tb} → {self.escalate[0]})"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "first": list(self.first), "tie_breaker": self.tie_breaker,
                "escalate": list(self.escalate)}

    @classmethod
    def from_dict(cls, d: dict) -> Strategy:
        try:
            return cls(tuple(d["first"]), d.get("tie_breaker"), tuple(d.get("escalate") or ()))
        except KeyError as e:
            raise ValueError(f"a strategy needs {e.args[0]!r} (got keys {sorted(d)})") from None
