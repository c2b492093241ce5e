"""A strategy replayed on logged answers: what it would have returned and paid on a request already served.

    from training.policy.replay import replay
    ok, usd = replay(strategy, answers, correct, cost, tools, price)   # per model: calls, label, cost of its call

`switchcraft learn` scores a new router on held-out logged requests this way (every pool model answered
them, through exploration). The run is `training.policy.rules.walk`, the rules the gateway follows, with the
agreement check of the gateway (`data.verify.agree.calls_agree` on the decoded calls with the request's tools).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from data.schema import Tool
from data.verify.agree import calls_agree, disagreement_kind
from training.policy.rules import Path, walk
from training.policy.strategy import Strategy


def replay_path(strategy: Strategy, answers: Mapping[str, list], tools: list[Tool], price: Mapping[str, float]) -> Path:
    """The calls `strategy` makes on these answers (model -> decoded calls) and whose answer goes back."""
    return walk(strategy, lambda x, y: calls_agree(tools, answers[x], answers[y]),
                lambda x, y: disagreement_kind(tools, answers[x], answers[y]), price)


def replay(strategy: Strategy, answers: Mapping[str, list], correct: Mapping[str, bool], cost: Mapping[str, float],
           tools: Sequence[Tool], price: Mapping[str, float]) -> tuple[bool, float]:
    """(correct, cost) of running `strategy` on logged answers: the returned answer's label, every call made
    paid (an answer in hand is reused for free). Every model answered, so there are no failures to skip."""
    path = replay_path(strategy, answers, list(tools), price)
    return correct[path.returned], sum(cost[m] for m in path.calls)
