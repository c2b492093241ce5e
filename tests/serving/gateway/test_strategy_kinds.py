"""A strategy kind defined in this file alone, registered, and run wherever a strategy runs: the offline simulation
and the replay of logged answers, the gateway against the replay server (real recorded BFCL v1 answers), the
budget's hold, the trace and the console. Nothing outside this file knows the kind.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_strategy_kinds.py

`tool-first(a, b → e)` asks a alone; if a's answer makes no tool call it asks b; if b's makes none either, it
escalates. Its first step is a alone although `first` names two models, so the budget holds a's worst case and
extends the hold for b; its calls go one after the other, so their latencies add up offline and lie end to end in
the trace. Run as an agreement, or held as its `first`, it would fail these tests.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from data.decoders import decode
from data.schema import Output
from data.verify import language_of, prepare, verify
from evaluation.offline.routing_eval import RoutingData
from serving.core.budget import call_worst_case_usd, first_step, first_step_usd
from serving.gateway.config import OtelSettings
from serving.gateway.tracing import SPAN_NAME, Tracing
from tests.serving.gateway.helpers import A, B, POOL, TIE, TOP, cost_of, decoded, pool_env, replay_app, tools_of
from tests.serving.helpers import AUTH, KEY, Loopback, bearer, log_has, openai_body, post, wait_for
from training.policy import Strategy, StrategyPolicy
from training.policy.kinds import Path, StrategyKind, escalation, get, names, register, unregister
from training.policy.replay import replay, replay_path
from training.policy.simulate import CascadeData, run_rows

pytestmark = pytest.mark.integration
LIMITED = "sk-sc-test-kinds-limited-0123456789abcd"  # a key with a day's budget: its holds are extended per call
# gemini-flash asked first, gpt-4o next, gpt-4o-mini (which calls on every picked query) on escalation.
FIRST, SECOND, ESCALATE = B, TOP, A
LATENCY = {FIRST: 1.0, SECOND: 2.0, ESCALATE: 4.0}  # seconds, as recorded offline


class ToolFirst(StrategyKind):
    """tool-first(a, b → e…): a; b when a makes no tool call; the escalation when b makes none either."""

    name = "tool-first"

    def check(self, s) -> None:
        if len(s.first) != 2 or s.tie_breaker is not None or s.resolve or not s.escalate:
            raise ValueError("tool-first asks two models in turn, then escalates: {first: [a, b], escalate: [e]}")

    def title(self, s) -> str:
        return f"tool-first({s.first[0]}, {s.first[1]} → {s.escalate[0]})"

    def first_step(self, s) -> tuple[str, ...]:
        return s.first[:1]

    def walk(self, s, answers, price) -> Path:
        a, b = s.first
        if answers.called(a):
            return Path((a,), a)
        if answers.called(b):
            return Path((a, b), b)
        e = escalation(s)[0]
        return Path((a, b) if e in (a, b) else (a, b, e), e, reused=e in (a, b), escalated=True)

    async def execute(self, s, ex) -> None:
        a, b = s.first
        held = {a: (await ex.together((a,)))[0]}
        if held[a].calls:
            return ex.answer(held[a], "tool_call")
        held[b] = await ex.call(b, "second")
        if held[b].calls:
            return ex.answer(held[b], "tool_call")
        await ex.escalate(held)


STRATEGY = {"kind": "tool-first", "first": [FIRST, SECOND], "escalate": [ESCALATE]}
NAME = f"tool-first({FIRST}, {SECOND} → {ESCALATE})"


@pytest.fixture
def tool_first():
    register(ToolFirst)
    yield Strategy((FIRST, SECOND), escalate=(ESCALATE,), kind="tool-first")
    unregister("tool-first")


@pytest.fixture(scope="module")
def queries(cascade_replay):
    """Recorded queries for each way tool-first ends: the first model calls; only the second does; neither does."""
    good, _, examples = cascade_replay
    out = {}
    for ex in examples:
        calls = {m: decoded(good.state, m, ex) for m in (FIRST, SECOND, ESCALATE)}
        if any(c is None for c in calls.values()) or not calls[ESCALATE]:
            continue
        case = "first" if calls[FIRST] else "second" if calls[SECOND] else "escalate"
        out.setdefault(case, ex)
    assert set(out) == {"first", "second", "escalate"}, sorted(out)
    return out


EXPECTED = {"first": (FIRST,), "second": (FIRST, SECOND), "escalate": (FIRST, SECOND, ESCALATE)}


def test_the_kind_is_named_parsed_and_kept_in_a_policy_while_registered(tool_first):
    assert names()[-1] == "tool-first" and tool_first.name == NAME and tool_first.kind == "tool-first"
    assert Strategy.from_dict(tool_first.to_dict()) == tool_first and tool_first.to_dict()["kind"] == "tool-first"
    with pytest.raises(ValueError, match="tool-first asks two models in turn"):
        Strategy((FIRST,), kind="tool-first")
    # In router.json's strategy policy: written, read back, and run with the remaining model as its fallback.
    models = [FIRST, SECOND, ESCALATE, TIE]
    rng = np.random.default_rng(0)
    policy = StrategyPolicy.fit(models, [tool_first], rng.uniform(0.1, 0.9, (40, 4)), rng.random((40, 1)) < 0.7,
                                np.full((40, 1), 1e-4), lam=10.0)
    back = StrategyPolicy.from_json(policy.to_json())
    assert back.menu == [tool_first] and back.to_json()["menu"][0]["name"] == NAME
    chosen, _ = back.strategy_for([0.9, 0.8, 0.7, 0.6])
    assert chosen == Strategy((FIRST, SECOND), escalate=(ESCALATE, TIE), kind="tool-first")


def test_offline_the_simulation_and_the_replay_run_it_on_recorded_answers(tool_first, queries, cascade_replay):
    good, _, _ = cascade_replay
    models, rows = [FIRST, SECOND, ESCALATE], list(queries.values())
    outputs, answers = [], []
    for ex in rows:
        calls = {m: decoded(good.state, m, ex) for m in models}
        answers.append(calls)
        outputs += [Output(example_id=ex.id, model=m, raw=good.state.recordings[POOL.get(m).recording][ex.id].raw,
                           calls=calls[m] or None, decode_error=None if calls[m] else "no_call: text",
                           latency_s=LATENCY[m]) for m in models]
    correct = np.array([[verify(prepare(ex.expected, ex.tools, language=language_of(ex)), a[m]).correct for m in models]
                        for ex, a in zip(rows, answers)])
    cost = np.array([[cost_of(good.state, m, ex) for m in models] for ex in rows])
    data = RoutingData([ex.id for ex in rows], np.array([ex.category for ex in rows]), models, correct, cost,
                       np.zeros(len(rows), int))
    cd = CascadeData.from_outputs(outputs, {ex.id: ex for ex in rows}, POOL, data)
    price = dict(zip(models, cost.mean(axis=0).tolist()))
    ok, paid, took, n_calls, escalated = run_rows(cd, tool_first, price)
    for i, case in enumerate(queries):
        called = EXPECTED[case]
        cols = [models.index(m) for m in called]
        assert n_calls[i] == len(called) and escalated[i] == (case == "escalate"), case
        assert paid[i] == pytest.approx(cost[i, cols].sum()) and took[i] == sum(LATENCY[m] for m in called)
        assert ok[i] == correct[i, cols[-1]]
        path = replay_path(tool_first, answers[i], tools_of(rows[i]), price)
        assert (path.calls, path.returned) == (called, called[-1])
        assert replay(tool_first, answers[i], dict(zip(models, correct[i])), dict(zip(models, cost[i])),
                      tools_of(rows[i]), price) == (ok[i], pytest.approx(paid[i]))


def test_the_budget_holds_its_first_step_alone(tool_first):
    body = {"messages": [{"role": "user", "content": "weather in Paris?"}], "max_tokens": 300}

    def worst(*models):
        return sum(call_worst_case_usd(POOL, m, body, 2000, chars_per_token=4.0, default_output_tokens=1024)
                   for m in models)

    assert first_step(tool_first) == (FIRST,)
    held = first_step_usd(POOL, tool_first, body, lambda m: 2000, chars_per_token=4.0, default_output_tokens=1024)
    assert held == pytest.approx(worst(FIRST)) and held < worst(FIRST, SECOND)


def reserved(url: str) -> float:
    text = httpx.get(url + "/metrics", headers=AUTH).text
    return float(next(x for x in text.splitlines() if x.startswith("switchcraft_reserved_usd_total ")).split()[-1])


def served_with(url: str, ex, strategy: dict) -> tuple[httpx.Response, float]:
    """The query run with `strategy` by the limited key, and what its hold came to (first step and extensions)."""
    before = reserved(url)
    r = post(url + "/v1/chat/completions", json=openai_body(ex, switchcraft={"strategy": strategy}),
             headers=bearer(LIMITED), timeout=60)
    assert r.status_code == 200, r.text
    return r, reserved(url) - before


def test_the_gateway_runs_holds_traces_logs_and_shows_it(tool_first, queries, cascade_replay, client, monkeypatch,
                                                         tmp_path):
    good, bad, _ = cascade_replay
    good.state.reset(), bad.state.reset()
    pool_env(monkeypatch, {"id": "kinds", "key": LIMITED, "limits": {"usd_per_day": 50.0}})
    exporter = InMemorySpanExporter()
    app = replay_app(client, good, bad, observers=[Tracing.from_settings(OtelSettings(), exporter=exporter)],
                     state={"path": str(tmp_path / "state")}, log={"path": str(tmp_path / "log"), "requests": True})
    with Loopback(app) as url:
        runs = {case: served_with(url, ex, STRATEGY) for case, ex in queries.items()}
        for case, (r, _) in runs.items():
            ex, called = queries[case], EXPECTED[case]
            meta = r.json()["switchcraft"]
            assert meta["strategy"] == {**STRATEGY, "name": NAME, "tie_breaker": None, "resolve": {},
                                        "source": "request", "ran": "tool-first"}
            assert meta["agreement"] is None and r.headers["x-switchcraft-strategy"] == NAME.replace("→", "->")
            assert [(c["model"], c["role"]) for c in meta["calls"]] == list(zip(called, ["first", "second",
                                                                                          "escalate"]))
            assert meta["returned"] == {"model": called[-1], "rule": "escalate" if case == "escalate" else "tool_call",
                                        "reused": False}
            assert meta["cost_usd"] == pytest.approx(sum(cost_of(good.state, m, ex) for m in called))
            # The gateway on live answers and the offline walk on the same recorded answers: one run.
            answers = {m: decoded(good.state, m, ex) for m in (FIRST, SECOND, ESCALATE)}
            assert replay_path(tool_first, answers, tools_of(ex), meta["decision"]["costs"]).calls == called
            assert [n for n, _ in returned_calls(r)] == [c.name for c in decode(
                good.state.recordings[POOL.get(called[-1]).recording][ex.id].raw, tools_of(ex)).calls]
        # The hold: the first model's worst case, then one extension per further call, as single strategies hold.
        ex = queries["second"]
        alone = {m: served_with(url, ex, {"first": [m]}) for m in (FIRST, SECOND)}
        alone["again"] = served_with(url, queries["first"], {"first": [FIRST]})
        assert runs["first"][1] > 0 and alone["again"][1] == pytest.approx(runs["first"][1])
        assert runs["second"][1] == pytest.approx(alone[FIRST][1] + alone[SECOND][1])
        # The trace: the kind and its name on the request's span, the calls one after the other.
        spans = [s for s in exporter.get_finished_spans()
                 if s.parent is None and s.attributes["switchcraft.request_id"] == runs["escalate"][0].headers[
                     "x-request-id"]]
        parent = spans[0]
        assert (parent.name, parent.attributes["switchcraft.strategy.kind"],
                parent.attributes["switchcraft.strategy.name"]) == (SPAN_NAME, "tool-first", NAME)
        assert "switchcraft.agreement.verdict" not in parent.attributes
        children = sorted((s for s in exporter.get_finished_spans()
                           if s.parent is not None and s.parent.span_id == parent.context.span_id),
                          key=lambda s: s.start_time)
        assert [c.attributes["gen_ai.request.model"] for c in children] == list(EXPECTED["escalate"])
        assert children[1].start_time == children[0].end_time and children[2].start_time == children[1].end_time
        # The console: the decision log's rows, listed and opened by the kind's name.
        wait_for(lambda: log_has(tmp_path / "log", len(runs) + 3, 0))
        login = httpx.post(url + "/console/login", data={"key": KEY, "next": "/console/requests"})
        console = httpx.Client(base_url=url, cookies={"switchcraft_console": login.cookies["switchcraft_console"]})
        listed = console.get("/console/requests", params={"range": "24h", "strategy": NAME}).text
        assert all(r.headers["x-request-id"] in listed for r, _ in runs.values())
        assert not any(r.headers["x-request-id"] in listed for r, _ in alone.values())
        trace = console.get(f"/console/requests/{runs['second'][0].headers['x-request-id']}").text
        assert NAME in trace and SECOND in trace.split('id="answers"')[1]
        assert NAME in console.get("/console/traffic", params={"range": "24h"}).text


def returned_calls(r: httpx.Response) -> list[tuple[str, str]]:
    return [(tc["function"]["name"], tc["function"]["arguments"])
            for tc in r.json()["choices"][0]["message"].get("tool_calls") or []]


def test_an_unregistered_kind_is_refused_by_name_with_the_known_ones(cascade_replay, client, monkeypatch):
    assert "tool-first" not in names()
    with pytest.raises(ValueError, match="unknown strategy kind 'tool-first'; known: agree, single"):
        get("tool-first")
    good, bad, _ = cascade_replay
    pool_env(monkeypatch)
    with Loopback(replay_app(client, good, bad)) as url:
        r = post(url + "/v1/chat/completions", json={"model": "router", "messages": [{"role": "user", "content": "hi"}],
                                                     "switchcraft": {"strategy": STRATEGY}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "switchcraft.strategy.kind", r.text
    assert "single, agree" in r.json()["error"]["message"]
