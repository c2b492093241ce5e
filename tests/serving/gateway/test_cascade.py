"""The gateway runs agreement cascades end to end: real recorded BFCL v1 answers served by the replay server.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_cascade.py

The queries are picked here with `calls_agree` on the recorded outputs of the
cascade's models (decoded the way the gateway decodes them): one where the two
first models agree, one where they disagree, one where a tie-breaker agrees with
one of them. Every call's cost is checked against the recording's usage × the
pool's prices.
"""

from __future__ import annotations

import httpx
import pytest

from data.decoders import decode
from data.verify.agree import calls_agree, disagreement_kind
from serving.app import create_app
from serving.gateway.config import ServingConfig
from tests.serving.gateway.helpers import A, B, POOL, TIE, TOP, replay_app, cost_of, decoded, pool_env, tools_of
from tests.serving.helpers import AUTH, Loopback, openai_body, post, stream

pytestmark = pytest.mark.integration


@pytest.fixture
def gateway(cascade_replay, client, monkeypatch):
    """make(cascade, failing models, **config) -> gateway URL; every pool key set in the environment."""
    good, bad, _ = cascade_replay
    pool_env(monkeypatch)
    servers = []

    def make(cascade: dict | None = None, failing: set[str] = frozenset(), prices: dict | None = None, **cfg) -> str:
        good.state.reset(), bad.state.reset()
        servers.append(Loopback(replay_app(client, good, bad, failing=failing, prices=prices, cascade=cascade, **cfg)))
        return servers[-1].__enter__()

    yield make, good, bad
    for s in servers:
        s.__exit__()


def chat(url: str, ex, **extra) -> httpx.Response:
    r = post(url + "/v1/chat/completions", json=openai_body(ex, **extra), timeout=60)
    assert r.status_code == 200, r.text
    return r


def completions(state) -> dict[str, int]:
    """Answers the replay server generated (billed), by pool model."""
    by_recording = {m.recording: m.name for m in POOL.models}
    out: dict[str, int] = {}
    for (recording, _), n in state.counts()[1].items():
        out[by_recording[recording]] = out.get(by_recording[recording], 0) + n
    return out


def returned_calls(r: httpx.Response) -> list[tuple[str, str]]:
    return [(tc["function"]["name"], tc["function"]["arguments"]) for tc in r.json()["choices"][0]["message"]["tool_calls"]]


def test_first_models_agree_answer_from_the_cheaper_at_the_cost_of_two_calls(gateway, picked):
    make, good, _ = gateway
    ex = picked["agree"]
    url = make({"first": [A, B], "escalate": [TOP]})
    r = chat(url, ex)
    meta = r.json()["switchcraft"]
    costs = meta["decision"]["costs"]
    cheaper = min((A, B), key=lambda m: costs[m])
    assert meta["strategy"] == {"kind": "agree", "name": f"agree({A}, {B} → {TOP})", "first": [A, B], "tie_breaker": None,
                                "escalate": [TOP], "resolve": {}, "source": "config", "ran": "agree"}
    assert meta["agreement"] == {"verdict": "agree", "checks": [{"models": [A, B], "agree": True}]}
    assert meta["returned"] == {"model": cheaper, "rule": "agree", "reused": False} and meta["escalated"] is False
    assert r.json()["model"] == meta["answered_by"] == r.headers["x-switchcraft-model"] == cheaper
    calls = meta["calls"]
    assert [(c["model"], c["role"], c["outcome"], c["returned"]) for c in calls] == [
        (A, "first", "ok", A == cheaper), (B, "first", "ok", B == cheaper)]
    for c in calls:  # every call: its real cost from usage × prices, the raw answer, the decoded calls
        assert c["cost_usd"] == pytest.approx(cost_of(good.state, c["model"], ex))
        assert c["raw"] == good.state.recordings[POOL.get(c["model"]).recording][ex.id].raw
        assert c["usage"]["input_tokens"] > 0 and c["latency_ms"] > 0 and c["calls"]
    assert meta["cost_usd"] == pytest.approx(cost_of(good.state, A, ex) + cost_of(good.state, B, ex))
    assert float(r.headers["x-switchcraft-cost-usd"]) == pytest.approx(meta["cost_usd"], abs=1e-8)
    assert r.headers["x-switchcraft-strategy"] == f"agree({A}, {B} -> {TOP})"
    assert r.headers["x-switchcraft-agreement"] == "agree" and r.headers["x-switchcraft-models-called"] == f"{A},{B}"
    assert completions(good.state) == {A: 1, B: 1}  # the escalation model was never called
    # The answer is OpenAI tool_calls under the caller's (dotted) names, whichever style answered.
    names = [name for name, _ in returned_calls(r)]
    assert names and all(n in {t.name for t in ex.tools} for n in names) and "." in names[0]


def test_first_models_disagree_escalate_and_the_trace_lists_all_three_calls(gateway, picked):
    make, good, _ = gateway
    ex = picked["disagree"]
    url = make({"first": [A, B], "escalate": [TOP]})
    r = chat(url, ex)
    meta = r.json()["switchcraft"]
    kind = disagreement_kind(tools_of(ex), decoded(good.state, A, ex), decoded(good.state, B, ex))
    assert meta["agreement"] == {"verdict": "disagree", "checks": [{"models": [A, B], "agree": False, "kind": kind}]}
    assert meta["returned"] == {"model": TOP, "rule": "escalate", "reused": False} and meta["escalated"] is True
    assert [(c["model"], c["role"], c["returned"]) for c in meta["calls"]] == [
        (A, "first", False), (B, "first", False), (TOP, "escalate", True)]
    assert meta["cost_usd"] == pytest.approx(sum(cost_of(good.state, m, ex) for m in (A, B, TOP)))
    assert [c["cost_usd"] for c in meta["calls"]] == pytest.approx([cost_of(good.state, m, ex) for m in (A, B, TOP)])
    assert completions(good.state) == {A: 1, B: 1, TOP: 1}
    assert r.headers["x-switchcraft-models-called"] == f"{A},{B},{TOP}" and r.headers["x-switchcraft-agreement"] == "disagree"
    top = decode(good.state.recordings[TOP][ex.id].raw, tools_of(ex)).calls
    assert [name for name, _ in returned_calls(r)] == [c.name for c in top]
    # The agreeing query on the same gateway, then the metrics of both.
    chat(url, picked["agree"])
    text = httpx.get(url + "/metrics", headers=AUTH).text
    for line in ('switchcraft_strategies_total{kind="agree",source="config"} 2.0',
                 'switchcraft_agreements_total{verdict="disagree"} 1.0', 'switchcraft_agreements_total{verdict="agree"} 1.0',
                 f'switchcraft_escalations_total{{to_model="{TOP}"}} 1.0', "switchcraft_upstream_calls_per_request_count 2.0",
                 "switchcraft_upstream_calls_per_request_sum 5.0", "switchcraft_request_cost_usd_count 2.0",
                 f'switchcraft_answers_decoded_total{{model="{TOP}",result="tool_calls"}} 1.0'):
        assert line in text, line
    top_cost = next(x for x in text.splitlines() if x.startswith(f'switchcraft_upstream_cost_usd_total{{model="{TOP}"}}'))
    assert float(top_cost.split()[-1]) == pytest.approx(cost_of(good.state, TOP, ex))


def test_a_resolve_rule_answers_a_disagreement_of_its_kind_without_asking_more(gateway, picked):
    """The rule for how the two disagree decides at once: no tie-breaker, no escalation, two calls paid."""
    make, good, _ = gateway
    ex = picked["tie"]  # the first two disagree (a tie-breaker would side with one)
    kind = disagreement_kind(tools_of(ex), decoded(good.state, A, ex), decoded(good.state, B, ex))
    url = make({"first": [A, B], "tie_breaker": TIE, "escalate": [TOP], "resolve": {kind: "second"}})
    r = chat(url, ex)
    meta = r.json()["switchcraft"]
    assert meta["agreement"] == {"verdict": "resolved", "checks": [{"models": [A, B], "agree": False, "kind": kind}]}
    assert meta["returned"] == {"model": B, "rule": "resolved", "reused": False} and meta["escalated"] is False
    assert [c["model"] for c in meta["calls"]] == [A, B] and completions(good.state) == {A: 1, B: 1}
    assert meta["cost_usd"] == pytest.approx(cost_of(good.state, A, ex) + cost_of(good.state, B, ex))
    assert meta["strategy"]["resolve"] == {kind: "second"} and meta["strategy"]["name"].endswith(f"; {kind}: second)")
    b_calls = decode(good.state.recordings[POOL.get(B).recording][ex.id].raw, tools_of(ex)).calls
    assert [name for name, _ in returned_calls(r)] == [c.name for c in b_calls]
    # "escalate" skips the tie-breaker: the escalation model answers, the tie-breaker is never called.
    url = make({"first": [A, B], "tie_breaker": TIE, "escalate": [TOP], "resolve": {kind: "escalate"}})
    meta = chat(url, ex).json()["switchcraft"]
    assert meta["returned"]["model"] == TOP and [c["model"] for c in meta["calls"]] == [A, B, TOP]
    assert completions(good.state) == {A: 1, B: 1, TOP: 1}
    # A rule for another kind changes nothing: the tie-breaker is asked as before.
    other = next(k for k in ("first_declines", "second_declines", "count", "functions", "arguments") if k != kind)
    url = make({"first": [A, B], "tie_breaker": TIE, "escalate": [TOP], "resolve": {other: "first"}})
    assert chat(url, ex).json()["switchcraft"]["agreement"]["verdict"] == "tie_broken"


def test_a_tie_breaker_that_sides_with_one_first_model(gateway, picked):
    make, good, _ = gateway
    ex = picked["tie"]
    url = make({"first": [A, B], "tie_breaker": TIE, "escalate": [TOP]})
    meta = chat(url, ex).json()["switchcraft"]
    sided = next(m for m in (A, B) if calls_agree(tools_of(ex), decoded(good.state, m, ex), decoded(good.state, TIE, ex)))
    costs = meta["decision"]["costs"]
    assert meta["agreement"]["verdict"] == "tie_broken"
    assert [c["models"] for c in meta["agreement"]["checks"]] == [[A, B], [A, TIE], [B, TIE]]
    assert meta["returned"]["model"] == min((sided, TIE), key=lambda m: costs[m])
    assert [c["model"] for c in meta["calls"]] == [A, B, TIE] and completions(good.state) == {A: 1, B: 1, TIE: 1}
    assert meta["cost_usd"] == pytest.approx(sum(cost_of(good.state, m, ex) for m in (A, B, TIE)))


def test_a_tie_break_answers_with_the_cheaper_of_the_agreeing_pair_not_the_first_model(gateway, picked):
    """Answering with the first model that agrees with the tie-breaker (not the cheaper of the pair) is caught."""
    make, good, _ = gateway
    ex = picked["tie_b"]  # the tie-breaker agrees with B only
    url = make({"first": [A, B], "tie_breaker": TIE, "escalate": [TOP]})
    r = chat(url, ex)
    meta = r.json()["switchcraft"]
    costs = meta["decision"]["costs"]
    assert costs[TIE] < costs[B]  # what makes this query the test: the agreeing pair's cheaper one is the tie-breaker
    assert meta["agreement"]["verdict"] == "tie_broken"
    assert [(c["models"], c["agree"]) for c in meta["agreement"]["checks"]] == [([A, B], False), ([A, TIE], False),
                                                                              ([B, TIE], True)]
    assert meta["returned"] == {"model": TIE, "rule": "tie_broken", "reused": False}
    assert r.json()["model"] == r.headers["x-switchcraft-model"] == TIE
    assert [(c["model"], c["returned"]) for c in meta["calls"]] == [(A, False), (B, False), (TIE, True)]
    tie_calls = decode(good.state.recordings[POOL.get(TIE).recording][ex.id].raw, tools_of(ex)).calls
    assert [name for name, _ in returned_calls(r)] == [c.name for c in tie_calls]


def test_each_call_is_costed_by_its_models_kind_of_price(gateway, picked):
    from data.pool import Prices

    make, good, _ = gateway
    ex = picked["disagree"]
    per_second = Prices(gpu_usd_per_hour=3600.0)  # 1 USD per second of this call
    url = make({"first": [A, B], "escalate": [TOP]}, prices={B: per_second, TOP: Prices(usd_per_query=0.25)})
    calls = chat(url, ex).json()["switchcraft"]["calls"]
    assert [c["model"] for c in calls] == [A, B, TOP]
    assert calls[0]["cost_usd"] == pytest.approx(cost_of(good.state, A, ex))  # per token: usage × prices
    assert calls[1]["cost_usd"] == pytest.approx(calls[1]["latency_ms"] / 1e3, abs=1e-4)  # per GPU-second: latency
    assert calls[2]["cost_usd"] == 0.25  # per query: flat


def test_a_model_failing_mid_cascade_agrees_with_nothing_and_escalation_falls_back(gateway, picked):
    make, good, bad = gateway
    ex = picked["agree"]  # A and B would agree: B failing makes it a disagreement
    url = make({"first": [A, B], "escalate": [TOP]}, failing={B})
    meta = chat(url, ex).json()["switchcraft"]
    assert meta["agreement"] == {"verdict": "disagree", "checks": [
        {"models": [A, B], "agree": False, "why": f"{B} gave no answer (http_500)"}]}
    assert [(c["model"], c["outcome"], c["cost_usd"] is None) for c in meta["calls"]] == [
        (A, "ok", False), (B, "http_500", True), (TOP, "ok", False)]
    assert meta["answered_by"] == TOP and meta["fallback"] is True
    assert meta["cost_usd"] == pytest.approx(cost_of(good.state, A, ex) + cost_of(good.state, TOP, ex))
    assert f'switchcraft_fallbacks_total{{from_model="{B}",reason="http_500"}} 1.0' in httpx.get(url + "/metrics", headers=AUTH).text
    # The escalation model failing too: on along the escalation list, whose next model, A, answered already: its
    # answer in hand is returned, at no new call and no new cost.
    url = make({"first": [A, B], "escalate": [TOP, A]}, failing={B, TOP})
    r = chat(url, ex)
    meta = r.json()["switchcraft"]
    assert meta["answered_by"] == A and meta["returned"] == {"model": A, "rule": "escalate", "reused": True}
    assert [(c["model"], c["role"], c["outcome"]) for c in meta["calls"]] == [
        (A, "first", "ok"), (B, "first", "http_500"), (TOP, "escalate", "http_500")]
    assert completions(good.state) == {A: 1} and bad.state.stats()["outcomes"] == {"500": 2}
    assert meta["cost_usd"] == pytest.approx(cost_of(good.state, A, ex))
    assert r.headers["x-switchcraft-models-called"] == f"{A},{B},{TOP}"
    # Without A on the list: on along the decision's ranking, skipping what was called.
    url = make({"first": [A, B], "escalate": [TOP]}, failing={B, TOP})
    meta = chat(url, ex).json()["switchcraft"]
    nxt = next(m for m in meta["decision"]["ranking"] if m not in (TOP, B))
    assert meta["answered_by"] == nxt and meta["returned"] == {"model": nxt, "rule": "escalate", "reused": nxt == A}
    assert [c["model"] for c in meta["calls"]] == [A, B, TOP] + ([] if nxt == A else [nxt])
    # Nothing answers at all: a 502 whose trace still lists every call.
    url = make({"first": [A, B], "escalate": [TOP]}, failing=set(POOL.names), upstream={"max_attempts": 2})
    r = post(url + "/v1/chat/completions", json=openai_body(ex), timeout=60)
    assert r.status_code == 502 and "no upstream answered" in r.json()["error"]["message"]
    calls = r.json()["switchcraft"]["calls"]
    assert [c["model"] for c in calls[:3]] == [A, B, TOP] and len(calls) == 4  # 2 first + at most 2 new escalations
    assert r.json()["switchcraft"]["cost_usd"] == 0


def test_a_prompt_models_text_answer_reaches_the_client_as_tool_calls(gateway, picked):
    make, good, _ = gateway
    ex = picked["agree"]
    url = make()
    raw = good.state.recordings[POOL.get(A).recording][ex.id].raw
    assert isinstance(raw, str) and raw.startswith("[")  # recorded as text, e.g. "[f(a=1)]"
    r = chat(url, ex, model=A)
    message = r.json()["choices"][0]["message"]
    assert message["content"] is None and r.json()["choices"][0]["finish_reason"] == "tool_calls"
    expected = decode(raw, tools_of(ex)).calls
    assert [(tc["type"], tc["function"]["name"]) for tc in message["tool_calls"]] == [("function", c.name) for c in expected]
    import json

    assert [json.loads(tc["function"]["arguments"]) for tc in message["tool_calls"]] == [c.arguments for c in expected]
    call = r.json()["switchcraft"]["calls"][0]
    assert call["raw"] == raw and call["decoder"] == "python" and call["calls"] == [
        {"name": c.name, "arguments": c.arguments} for c in expected]
    # A native model offered the legal name answers with it; the caller gets its own name back.
    native = good.state.recordings[POOL.get(B).recording][ex.id].raw
    assert "." not in next(iter(native[0]))
    r = chat(url, ex, model=B)
    assert [tc["function"]["name"] for tc in r.json()["choices"][0]["message"]["tool_calls"]] == [
        c.name for c in decode(native, tools_of(ex)).calls] and "." in ex.tools[0].name


def test_a_request_may_ask_for_a_strategy_and_streams_take_the_single_model_path(gateway, picked):
    make, good, _ = gateway
    ex = picked["disagree"]
    url = make()
    asked = {"first": [A, B], "escalate": [TOP]}
    meta = chat(url, ex, switchcraft={"strategy": asked}).json()["switchcraft"]
    assert meta["strategy"]["source"] == "request" and meta["decision"]["strategy"]["first"] == [A, B]
    assert meta["answered_by"] == TOP and len(meta["calls"]) == 3
    r = post(url + "/v1/chat/completions", timeout=60, json=openai_body(
        ex, switchcraft={"strategy": asked, "allowed_models": [A, TOP]}))
    assert r.status_code == 422 and B in r.json()["error"]["message"]
    r = post(url + "/v1/chat/completions", json=openai_body(ex, switchcraft={"strategy": {**asked, "first": [A, "x"]}}))
    assert r.status_code == 400 and r.json()["error"]["param"] == "switchcraft.strategy.first[1]"
    for bad_resolve, says in (([["count", "first"]], "must be an object"), ({"count": "third"}, "unknown action 'third'")):
        r = post(url + "/v1/chat/completions", json=openai_body(ex, switchcraft={"strategy": {**asked, "resolve": bad_resolve}}))
        assert r.status_code == 400 and says in r.json()["error"]["message"], r.text
    kind = disagreement_kind(tools_of(ex), decoded(good.state, A, ex), decoded(good.state, B, ex))
    meta = chat(url, ex, switchcraft={"strategy": {**asked, "resolve": {kind: "first"}}}).json()["switchcraft"]
    assert meta["returned"] == {"model": A, "rule": "resolved", "reused": False} and len(meta["calls"]) == 2
    # /v1/route shows the strategy the chat endpoint would run.
    route = post(url + "/v1/route", json={"messages": openai_body(ex)["messages"],
                                                "constraints": {"strategy": asked}}).json()
    assert route["strategy"]["kind"] == "agree" and route["strategy_source"] == "request"

    # A stream with a cascade configured: one model, the decision's ranking (the replay answers whole).
    url = make({"first": [A, B], "escalate": [TOP]})
    with stream("POST", url + "/v1/chat/completions", json=openai_body(ex, stream=True), timeout=60) as r:
        assert r.status_code == 200
        headers = dict(r.headers)
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    import json

    first = json.loads(events[0])
    chosen = first["switchcraft"]["decision"]["chosen"]
    assert first["switchcraft"]["strategy"]["ran"] == "single" and first["switchcraft"]["strategy"]["kind"] == "agree"
    assert headers["x-switchcraft-strategy"].startswith(f"single({chosen})") and "x-switchcraft-agreement" not in headers
    assert sum(completions(good.state).values()) == 1 and events[-1] == "[DONE]"


def test_a_configured_cascade_must_name_pool_models(client):
    with pytest.raises(ValueError, match=r"router.cascade.first\[1\]: 'gpt-5' is not in the pool"):
        create_app(ServingConfig(router={"cascade": {"first": [A, "gpt-5"], "escalate": [TOP]}}), client=client, pool=POOL)
