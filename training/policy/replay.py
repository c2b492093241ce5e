"""A strategy replayed on logged answers: what it would have returned and paid on a request already served.

    from training.policy.replay import replay
    ok, usd = replay(strategy, answers, correct, cost, tools, price)   # per model: calls, label, cost of its call

`switchcraft learn` scores a new router on held-out logged requests this way (every pool model answered
them, through exploration). The run is the strategy's kind's `walk` (`training.policy.kinds`), the rules the
gateway follows, with the agreement check of the gateway (`data.verify.agree.calls_agree` on the decoded calls
with the request's tools).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from data.schema import Tool
from data.verify.agree import calls_agree, disagreement_kind
from training.policy.kinds import Path, kind_of
from training.policy.strategy import Strategy


class LoggedAnswers:
    """One logged request's answers (model -> decoded calls) as the answers a kind walks."""

    def __init__(self, answers: Mapping[str, list], tools: list[Tool]) -> None:
        self.answers, self.tools = answers, tools

    def agree(self, x: str, y: str) -> bool:
        return calls_agree(self.tools, self.answers[x], self.answers[y])

    def disagreement(self, x: str, y: str) -> str | None:
        return disagreement_kind(self.tools, self.answers[x], self.answers[y])

    def called(self, x: str) -> bool:
        return bool(self.answers[x])


def replay_path(strategy: Strategy, answers: Mapping[str, list], tools: list[Tool], price: Mapping[str, float]) -> Path:
    """The calls `strategy` makes on these answers (model -> decoded calls) and whose answer goes back."""
    return kind_of(strategy).walk(strategy, LoggedAnswers(answers, tools), price)


def replay(strategy: Strategy, answers: Mapping[str, list], correct: Mapping[str, bool], cost: Mapping[str, float],
           tools: Sequence[Tool], price: Mapping[str, float]) -> tuple[bool, float]:
    """(correct, cost) of running `strategy` on logged answers: the returned answer's label, every call made
    paid (an answer in hand is reused for free). Every model answered, so there are no failures to skip."""
    path = replay_path(strategy, answers, list(tools), price)
    return correct[path.returned], sum(cost[m] for m in path.calls)
