"""`switchcraft learn`'s replay of a served strategy on logged answers (evaluation.learn.replay) against the
vectorised simulation every report uses (evaluation.strategies.simulate): two implementations of the gateway's
rules that must not drift apart.

    .venv/bin/python -m pytest -q tests/evaluation/test_learn_replay.py
"""

from __future__ import annotations

import numpy as np

from data.pool import Pool
from data.schema import Call, Example, Expected, Message, Output, Tool
from evaluation.offline.routing_eval import RoutingData
from training.policy import Strategy
from training.policy.replay import replay
from training.policy.simulate import CascadeData, menu_of, simulate, to_strategy

TOOL = Tool(name="f", parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                                  "required": ["a"]})
# Answers that agree, disagree on a value, on the number of calls, on an optional argument, or decline.
ANSWERS = [[], [Call(name="f", arguments={"a": 1})], [Call(name="f", arguments={"a": 2})],
           [Call(name="f", arguments={"a": 1}), Call(name="f", arguments={"a": 2})],
           [Call(name="f", arguments={"a": 1, "b": "x"})]]


def _recorded(n: int = 160, m: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    models = [f"m{j}" for j in range(m)]
    pool = Pool.model_validate({"models": [{"name": x, "prompt_style": "prompt",
                                            "prices": {"input_per_mtok": 1, "output_per_mtok": 1}} for x in models]})
    examples, outs, answers = {}, [], []
    # A model answers like the one before it most of the time, so every kind of row occurs: agreements,
    # disagreements, tie-breakers siding with one side or both.
    for i in range(n):
        eid = f"x:{i}"
        examples[eid] = Example(id=eid, source="x", category="c", messages=[Message(role="user", content="hi")],
                                tools=[TOOL], expected=Expected.nothing())
        row, prev = {}, int(rng.integers(len(ANSWERS)))
        for x in models:
            prev = prev if rng.random() < 0.5 else int(rng.integers(len(ANSWERS)))
            row[x] = ANSWERS[prev]
            outs.append(Output(example_id=eid, model=x, raw="[…]", calls=row[x] or None,
                               decode_error=None if row[x] else "free text"))
        answers.append(row)
    correct = rng.random((n, m)) < 0.7
    cost = rng.uniform(0.001, 0.01, (n, m)) * np.array([1, 2, 4, 8])
    data = RoutingData(list(examples), np.array(["c"] * n), models, correct, cost, np.arange(n) % 4)
    return CascadeData.from_outputs(outs, examples, pool, data), answers


def test_replay_runs_every_strategy_of_the_menu_as_the_simulation_does():
    cd, answers = _recorded()
    models, costs = cd.data.models, cd.data.cost.mean(axis=0)
    price = dict(zip(models, costs))
    specs = menu_of(len(models), rules=(0.0,))
    sim = simulate(cd, specs, costs, fit_rows=np.arange(len(answers)))
    assert any(sim.rules.get(k) for k in range(len(specs)))  # some resolve rules are on the menu
    for k, spec in enumerate(specs):
        strategy = to_strategy(spec, models, sim.rules.get(k))
        for i, row in enumerate(answers):
            got = replay(strategy, row, dict(zip(models, cd.data.correct[i])), dict(zip(models, cd.data.cost[i])),
                         [TOOL], price)
            assert got[0] == sim.correct[i, k] and np.isclose(got[1], sim.cost[i, k]), (strategy.name, i)


def test_a_rule_that_skips_the_tie_breaker_pays_for_it_when_it_escalates_to_it():
    # The tie-breaker is also the escalation; a rule sends this kind of disagreement straight to escalation, so the
    # tie-breaker was never asked before: escalating to it is a new call, and it is paid.
    a, b, t = (Call(name="f", arguments={"a": 1}),), (Call(name="f", arguments={"a": 2}),), ()
    s = Strategy.agree("m0", "m1", tie_breaker="m2", escalate=("m2",), resolve={"arguments": "escalate"})
    cost = {"m0": 1.0, "m1": 2.0, "m2": 10.0}
    ok, paid = replay(s, {"m0": list(a), "m1": list(b), "m2": list(t)}, {"m0": False, "m1": False, "m2": True}, cost,
                      [TOOL], cost)
    assert ok and paid == 13.0
    # Without the rule the tie-breaker is asked first; escalating to it again reuses that answer: no second charge.
    s = Strategy.agree("m0", "m1", tie_breaker="m2", escalate=("m2",))
    assert replay(s, {"m0": list(a), "m1": list(b), "m2": list(t)}, {"m0": False, "m1": False, "m2": True}, cost,
                  [TOOL], cost) == (True, 13.0)
