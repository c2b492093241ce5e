"""One set of cascade rules, three runners: the gateway's cascade (on stub upstream answers), the vectorised
simulation on recordings and the replay of logged answers must do the same thing for every strategy.

    .venv/bin/python -m pytest -q tests/training/policy/test_parity.py

The answers: every combination of five per model over four models (no call, f(a=1), f(a=2), both calls,
g()), so every kind of disagreement, every side a tie-breaker can take and every escalation occur. Every
strategy of the 4-model menu (each agreement also with resolve rules giving every kind every action) runs on
two rows of each case it can meet; the three runners must agree on the answer returned, the calls made and
paid, the cost and the escalation.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass

import numpy as np

from data.pool import Pool
from data.schema import Call, Example, Expected, Message, Output, Tool, Usage
from data.verify.agree import DISAGREEMENT_KINDS
from serving.gateway.cascade import Cascade, CascadeRequest
from serving.core.metrics import GatewayMetrics
from serving.gateway.upstream import Attempt, UpstreamResult, no_answer
from training.policy import Strategy
from training.policy.replay import replay, replay_path
from training.policy.simulate import CascadeData, menu_of, run_rows, simulate, to_strategy

TOOLS = [Tool(name="f", parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                                    "required": ["a"]}),
         Tool(name="g", parameters={"type": "object", "properties": {}})]
F1, F2, G = Call(name="f", arguments={"a": 1}), Call(name="f", arguments={"a": 2}), Call(name="g", arguments={})
# No call, and calls that differ from f(a=1) by a value, by their number and by the function.
ANSWERS = [[], [F1], [F2], [F1, F2], [G]]
MODELS = ["m0", "m1", "m2", "m3"]
ACTIONS = ("first", "second", "escalate")
# Three rules that between them give every kind of disagreement every action (a Latin square).
RULES = [{k: ACTIONS[(i + v) % 3] for i, k in enumerate(DISAGREEMENT_KINDS)} for v in range(3)]


@dataclass
class Labels:
    """The label matrices a simulation reads (training.policy.simulate.Labelled)."""

    example_ids: list[str]
    models: list[str]
    correct: np.ndarray
    cost: np.ndarray
    folds: np.ndarray

    def subset(self, rows):
        return Labels([self.example_ids[i] for i in rows], self.models, self.correct[rows], self.cost[rows],
                      self.folds[rows])


def _pool() -> Pool:
    return Pool.model_validate({"models": [{"name": x, "prompt_style": "native", "prices": {
        "input_per_mtok": 0.5 * (j + 1), "output_per_mtok": 2.0 * (j + 1) ** 2}} for j, x in enumerate(MODELS)]})


def _every_combination(seed: int = 0):
    """Every combination of ANSWERS over MODELS: their outputs, labels, token usage and what each call costs."""
    rng = np.random.default_rng(seed)
    pool = _pool()
    rows = list(itertools.product(range(len(ANSWERS)), repeat=len(MODELS)))
    examples, outputs, answers, usage = {}, [], [], []
    for i, row in enumerate(rows):
        eid = f"x:{i}"
        examples[eid] = Example(id=eid, source="x", category="c", messages=[Message(role="user", content="hi")],
                                tools=TOOLS, expected=Expected.nothing())
        answers.append({m: ANSWERS[p] for m, p in zip(MODELS, row)})
        usage.append({m: Usage(input_tokens=int(rng.integers(50, 500)), output_tokens=int(rng.integers(5, 60)))
                      for m in MODELS})
        outputs += [Output(example_id=eid, model=m, raw=[c.model_dump() for c in ANSWERS[p]] or "I cannot help.",
                           calls=ANSWERS[p] or None,
                           decode_error=None if ANSWERS[p] else "no_call: text") for m, p in zip(MODELS, row)]
    cost = np.array([[pool.cost_usd(m, u[m]) for m in MODELS] for u in usage])
    correct = rng.random(cost.shape) < 0.6
    labels = Labels(list(examples), MODELS, correct, cost, np.zeros(len(rows), int))
    return CascadeData.from_outputs(outputs, examples, pool, labels), answers, usage, pool


def _menu() -> list[Strategy]:
    out = []
    for spec in menu_of(len(MODELS)):
        s = to_strategy(spec, MODELS)
        out.append(s)
        if s.kind == "agree":
            out += [to_strategy(spec, MODELS, rule) for rule in RULES]
    return out


class StubUpstreams:
    """Each model answers the current row's recorded answer, as a native tool-calling completion."""

    def __init__(self) -> None:
        self.answers: dict[str, list[Call]] = {}
        self.usage: dict[str, Usage] = {}

    async def attempt(self, model, payload, attempts, *, down=None, estimate=None):
        attempts.append(Attempt(model, "ok", 200, 10.0))
        calls, u = self.answers[model], self.usage[model]
        message = ({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for k, c in enumerate(calls)]} if calls else {"role": "assistant", "content": "I cannot help with that."})
        body = {"id": "x", "object": "chat.completion", "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens}}
        return UpstreamResult(model, attempts, body=body)

    def no_answer(self, attempts):
        return no_answer(attempts)

    def abandoned(self, model, reason, estimate):
        pass


def _rows_of_every_case(cd: CascadeData, s: Strategy, per_case: int = 2) -> list[int]:
    """`per_case` rows of each case `s` can meet: the first two agree, or how they disagree and which side the
    tie-breaker takes; a single model, a row per answer."""
    col = {m: j for j, m in enumerate(MODELS)}
    if s.kind == "single":
        return list(range(len(ANSWERS)))
    a, b = (col[m] for m in s.first)
    t = col.get(s.tie_breaker)
    seen: dict[tuple, list[int]] = {}
    for i in range(len(cd.agree)):
        case = (bool(cd.agree[i, a, b]), int(cd.kinds[i, a, b]),
                None if t is None else (bool(cd.agree[i, t, a]), bool(cd.agree[i, t, b])))
        if len(seen.setdefault(case, [])) < per_case:
            seen[case].append(i)
    return sorted(i for rows in seen.values() for i in rows)


def _gateway_runs(strategies, rows, answers, usage, pool, price):
    """run[(strategy index, row)]: (returned model, models called, cost, escalated) through the gateway's Cascade."""
    upstreams = StubUpstreams()
    cascade = Cascade(upstreams, pool, GatewayMetrics(), max_attempts=3)

    async def go():
        out = {}
        for k, s in enumerate(strategies):
            for i in rows[k]:
                upstreams.answers, upstreams.usage = answers[i], usage[i]
                run = await cascade.run(s, CascadeRequest(lambda m: {"model": m}, TOOLS, [], price))
                out[k, i] = (run.returned.model, tuple(c.model for c in run.calls), run.cost_usd,
                             run.verdict in ("tie_broken", "disagree"))
        return out

    return asyncio.run(go())


def test_the_gateway_the_simulation_and_the_replay_run_every_strategy_alike():
    cd, answers, usage, pool = _every_combination()
    strategies = _menu()
    costs = cd.data.cost.mean(axis=0)
    price = dict(zip(MODELS, costs.tolist()))
    kinds = {int(k) for k in np.unique(cd.kinds)} - {0}
    assert kinds == set(range(1, len(DISAGREEMENT_KINDS) + 1))  # every kind of disagreement occurs
    sim = [run_rows(cd, s, price) for s in strategies]  # the simulation's run of one strategy (rows vectorised)
    rows = [_rows_of_every_case(cd, s) for s in strategies]
    gateway = _gateway_runs(strategies, rows, answers, usage, pool, price)
    col = {m: j for j, m in enumerate(MODELS)}
    verdicts = set()
    for k, s in enumerate(strategies):
        for i in rows[k]:
            row = answers[i]
            returned, called, paid, escalated = gateway[k, i]
            path = replay_path(s, row, TOOLS, price)
            ok, replay_cost = replay(s, row, dict(zip(MODELS, cd.data.correct[i])), dict(zip(MODELS, cd.data.cost[i])),
                                     TOOLS, price)
            where = (s.name, i, row)
            assert (path.returned, path.calls) == (returned, called), where
            sim_ok, sim_cost, _, sim_calls, sim_escalated = (x[i] for x in sim[k])
            assert ok == cd.data.correct[i, col[returned]] == sim_ok, where
            assert paid == replay_cost == sim_cost, where
            assert len(called) == sim_calls and escalated == path.escalated == sim_escalated, where
            verdicts.add(path.verdict)
    assert verdicts == {None, "agree", "resolved", "tie_broken", "disagree"}


def test_the_replay_runs_the_simulations_menu_with_its_fitted_rules_alike():
    cd, answers, _, _ = _every_combination(seed=1)
    costs = cd.data.cost.mean(axis=0)
    price = dict(zip(MODELS, costs.tolist()))
    specs = menu_of(len(MODELS), rules=(0.0, 0.02))
    sim = simulate(cd, specs, costs, fit_rows=np.arange(len(answers)))
    assert any(sim.rules.get(k) for k in range(len(specs)))  # some resolve rules are on the menu
    for k, spec in enumerate(specs):
        strategy = to_strategy(spec, MODELS, sim.rules.get(k))
        for i, row in enumerate(answers):
            got = replay(strategy, row, dict(zip(MODELS, cd.data.correct[i])), dict(zip(MODELS, cd.data.cost[i])),
                         TOOLS, price)
            assert got == (sim.correct[i, k], sim.cost[i, k]), (strategy.name, i)


def test_a_rule_that_skips_the_tie_breaker_pays_for_it_when_it_escalates_to_it():
    # The tie-breaker is also the escalation; a rule sends this kind of disagreement straight to escalation, so the
    # tie-breaker was never asked before: escalating to it is a new call, and it is paid.
    a, b, t = [F1], [F2], []
    s = Strategy.agree("m0", "m1", tie_breaker="m2", escalate=("m2",), resolve={"arguments": "escalate"})
    cost = {"m0": 1.0, "m1": 2.0, "m2": 10.0}
    ok, paid = replay(s, {"m0": a, "m1": b, "m2": t}, {"m0": False, "m1": False, "m2": True}, cost, TOOLS, cost)
    assert ok and paid == 13.0
    # Without the rule the tie-breaker is asked first; escalating to it again reuses that answer: no second charge.
    s = Strategy.agree("m0", "m1", tie_breaker="m2", escalate=("m2",))
    assert replay(s, {"m0": a, "m1": b, "m2": t}, {"m0": False, "m1": False, "m2": True}, cost, TOOLS, cost) == (True, 13.0)
