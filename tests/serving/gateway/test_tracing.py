"""OpenTelemetry traces of the gateway: real requests on loopback, real recorded BFCL v1 answers upstream.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_tracing.py

A Tracing with the SDK's in-memory exporter, given to `create_app(observers=)`, shows the span tree of an
agreement cascade (the disagreement kind on the calls that disagreed) and of a named model; `otel.endpoint` in the
config makes the app export over the real OTLP/HTTP exporter to a collector on 127.0.0.1 (a tiny HTTP server here
that decodes the protobuf), with the breaker state of each call's endpoint. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from data.verify.agree import disagreement_kind
from serving.gateway.cascade import CallRecord, Run
from serving.gateway.config import OtelSettings
from serving.core.record import Served
from serving.core.state import Charge
from serving.gateway.tracing import SPAN_NAME, Tracing
from serving.gateway.upstream import Attempt
from tests.serving.gateway.helpers import A, B, TOP, replay_app, decoded, pool_env, tools_of
from tests.serving.helpers import KEY, SECRET, Loopback, openai_body, post
from training.policy import Strategy

pytestmark = pytest.mark.integration
CASCADE = {"first": [A, B], "escalate": [TOP]}


@pytest.fixture
def gateway(cascade_replay, client, monkeypatch):
    """(make(cascade, failing, observers, **config) -> URL, stop() -> None, good replay)."""
    good, bad, _ = cascade_replay
    pool_env(monkeypatch)
    servers: list[Loopback] = []

    def make(cascade: dict | None = None, failing: set[str] = frozenset(), observers=None, **cfg) -> str:
        good.state.reset(), bad.state.reset()
        servers.append(Loopback(replay_app(client, good, bad, failing=failing, cascade=cascade, observers=observers,
                                            **cfg)))
        return servers[-1].__enter__()

    def stop() -> None:  # the app's lifespan ends: observers are closed (spans flushed)
        while servers:
            servers.pop().__exit__()

    yield make, stop, good
    stop()


def chat(url: str, body: dict):
    r = post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r


def split(spans) -> tuple:
    parents = [s for s in spans if s.parent is None]
    assert len(parents) == 1 and parents[0].name == SPAN_NAME, [s.name for s in spans]
    children = sorted((s for s in spans if s.parent is not None), key=lambda s: s.start_time)
    return parents[0], children


def test_a_cascade_is_one_span_with_a_child_per_upstream_call(gateway, picked, client):
    make, _, good = gateway
    exporter = InMemorySpanExporter()
    url = make(CASCADE, observers=[Tracing.from_settings(OtelSettings(), exporter=exporter)])
    ex = picked["disagree"]
    r = chat(url, openai_body(ex))
    meta = r.json()["switchcraft"]
    parent, children = split(exporter.get_finished_spans())
    p = dict(parent.attributes)
    assert {k: p[k] for k in ("switchcraft.request_id", "switchcraft.key_id", "http.response.status_code",
                              "switchcraft.router_version", "switchcraft.strategy.kind", "switchcraft.stream",
                              "switchcraft.agreement.verdict", "switchcraft.answered_by", "switchcraft.calls")} == {
        "switchcraft.request_id": r.headers["x-request-id"], "switchcraft.key_id": "test",
        "http.response.status_code": 200, "switchcraft.router_version": client.version,
        "switchcraft.strategy.kind": "agree", "switchcraft.stream": False,
        "switchcraft.agreement.verdict": r.headers["x-switchcraft-agreement"], "switchcraft.answered_by": TOP,
        "switchcraft.calls": 3}
    assert r.headers["x-switchcraft-agreement"] == "disagree" and r.headers["x-switchcraft-model"] == TOP
    assert p["switchcraft.strategy.name"].replace("→", "->") == r.headers["x-switchcraft-strategy"]
    assert p["switchcraft.cost_usd"] > 0
    assert p["switchcraft.cost_usd"] == pytest.approx(float(r.headers["x-switchcraft-cost-usd"]), abs=1e-8)
    assert p["switchcraft.cost_estimated_usd"] == 0 and p["switchcraft.example_id"] == ex.id
    assert "switchcraft.error" not in p and parent.status.status_code is StatusCode.UNSET
    assert KEY not in repr(p) and SECRET not in repr(p)
    # One child per call, in the order made, each with the call's own figures (the response's trace has them too).
    assert len(children) == len(meta["calls"]) == 3
    for span, call in zip(children, meta["calls"], strict=True):
        c = dict(span.attributes)
        assert span.parent.span_id == parent.context.span_id and span.context.trace_id == parent.context.trace_id
        assert (span.name, c["gen_ai.request.model"], c["switchcraft.call.role"], c["switchcraft.call.outcome"],
                c["http.response.status_code"], c["switchcraft.call.returned"]) == (
            f"chat {call['model']}", call["model"], call["role"], "ok", 200, call["returned"])
        assert c["switchcraft.call.cost_usd"] == pytest.approx(call["cost_usd"])
        assert (c["gen_ai.usage.input_tokens"], c["gen_ai.usage.output_tokens"]) == (
            call["usage"]["input_tokens"], call["usage"]["output_tokens"])
        assert c["switchcraft.call.latency_ms"] == pytest.approx(call["latency_ms"], abs=0.01)
        assert (span.end_time - span.start_time) / 1e6 == pytest.approx(call["latency_ms"], abs=0.01)
        assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time
        assert "switchcraft.breaker.state" not in c  # no breaker_state given
    assert sum(s.attributes["switchcraft.call.cost_usd"] for s in children) == pytest.approx(p["switchcraft.cost_usd"])
    # The two first models side by side, the escalation after both, ending when the request did.
    a, b, top = children
    assert a.start_time == b.start_time and top.start_time == max(a.end_time, b.end_time)
    assert top.end_time == parent.end_time
    # The disagreement: its kind on both calls that took part, nothing on the escalation.
    kind = disagreement_kind(tools_of(ex), decoded(good.state, A, ex), decoded(good.state, B, ex))
    assert meta["agreement"]["checks"] == [{"models": [A, B], "agree": False, "kind": kind}]
    for span, other in ((a, B), (b, A)):
        assert {k: span.attributes.get(k) for k in ("switchcraft.agreement.verdict", "switchcraft.disagreement.kind",
                                                    "switchcraft.agreement.disagreed_with",
                                                    "switchcraft.agreement.agreed_with")} == {
            "switchcraft.agreement.verdict": "disagree", "switchcraft.disagreement.kind": kind,
            "switchcraft.agreement.disagreed_with": (other,), "switchcraft.agreement.agreed_with": ()}
    assert not any(k.startswith(("switchcraft.agreement", "switchcraft.disagreement")) for k in top.attributes)

    # A named model on the same gateway: its own trace, one call, no cascade.
    exporter.clear()
    r = chat(url, openai_body(picked["agree"], model=A))
    parent2, children2 = split(exporter.get_finished_spans())
    assert parent2.context.trace_id != parent.context.trace_id and len(children2) == 1
    assert (parent2.attributes["switchcraft.strategy.kind"], parent2.attributes["switchcraft.answered_by"],
            parent2.attributes["gen_ai.request.model"]) == ("single", A, A)
    assert "switchcraft.agreement.verdict" not in parent2.attributes
    assert children2[0].attributes["switchcraft.call.role"] == "first"
    assert children2[0].attributes["switchcraft.call.cost_usd"] == pytest.approx(
        float(r.headers["x-switchcraft-cost-usd"]), abs=1e-8)
    assert children2[0].end_time == parent2.end_time


class Collector:
    """An OTLP/HTTP traces receiver on 127.0.0.1: keeps every export request it is sent (path, headers, spans)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict, ExportTraceServiceRequest]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                collector.received.append((self.path, headers, ExportTraceServiceRequest.FromString(body)))
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"


def value(v):
    """An OTLP AnyValue as Python."""
    which = v.WhichOneof("value")
    return [value(x) for x in v.array_value.values] if which == "array_value" else getattr(v, which)


def attributes(kvs) -> dict:
    return {kv.key: value(kv.value) for kv in kvs}


def test_otel_endpoint_exports_each_request_over_otlp_http_with_breaker_states(gateway, picked):
    make, stop, _ = gateway
    with Collector() as collector:
        url = make(CASCADE, failing={B}, upstream={"breaker": {"failures": 1}},
                   otel={"endpoint": collector.url, "service_name": "switchcraft-test", "headers": {"x-tenant": "t1"}})
        r = chat(url, openai_body(picked["agree"]))  # A and B would agree: B failing makes it a disagreement
        stop()  # the lifespan flushes the batch processor: the export has arrived when this returns
        assert r.headers["x-switchcraft-agreement"] == "disagree" and r.headers["x-switchcraft-model"] == TOP
        assert len(collector.received) == 1, "one batch: one export request"
        path, headers, request = collector.received[0]
    assert path == "/v1/traces" and headers["x-tenant"] == "t1" and headers["content-type"] == "application/x-protobuf"
    [resource_spans] = request.resource_spans
    assert attributes(resource_spans.resource.attributes)["service.name"] == "switchcraft-test"
    spans = [s for scope in resource_spans.scope_spans for s in scope.spans]
    [parent] = [s for s in spans if not s.parent_span_id]
    children = {s.name: s for s in spans if s.parent_span_id == parent.span_id}
    assert len(spans) == 4 and set(children) == {f"chat {m}" for m in (A, B, TOP)}
    p = attributes(parent.attributes)
    assert (parent.name, p["switchcraft.request_id"], p["switchcraft.answered_by"]) == (
        SPAN_NAME, r.headers["x-request-id"], TOP)
    assert p["switchcraft.cost_usd"] > 0
    assert p["switchcraft.cost_usd"] == pytest.approx(float(r.headers["x-switchcraft-cost-usd"]), abs=1e-8)
    c = {m: attributes(children[f"chat {m}"].attributes) for m in (A, B, TOP)}
    # B's endpoint failed once and its breaker (failures: 1) opened; A's and TOP's endpoint answered.
    assert [(c[m]["switchcraft.call.outcome"], c[m]["http.response.status_code"], c[m]["switchcraft.breaker.state"])
            for m in (A, B, TOP)] == [("ok", 200, "closed"), ("http_500", 500, "open"), ("ok", 200, "closed")]
    assert children[f"chat {B}"].status.code == children[f"chat {B}"].status.STATUS_CODE_ERROR
    assert "switchcraft.call.cost_usd" not in c[B] and "gen_ai.usage.input_tokens" not in c[B]
    # A silent model agrees with nothing: a disagreement with no kind.
    assert c[A]["switchcraft.agreement.disagreed_with"] == [B] and c[B]["switchcraft.agreement.disagreed_with"] == [A]
    assert "switchcraft.disagreement.kind" not in c[A] and c[A]["switchcraft.agreement.verdict"] == "disagree"


def test_a_hedge_ends_with_its_call_and_a_failed_request_is_an_error_span():
    """No gateway: a Served as serving/app.py builds it for a hedged request that no upstream answered."""
    exporter = InMemorySpanExporter()
    tracing = Tracing.from_settings(OtelSettings(), exporter=exporter, breaker_state={A: "half_open"}.__getitem__)
    run = Run(Strategy.single(A, (B,)))
    run.calls = [CallRecord(A, "first", Attempt(A, "hedge_lost", None, 300.0, 0.002)),
                 CallRecord(B, "hedge", Attempt(B, "http_502", 502, 120.0))]
    tracing(Served("rid-1", "acme", 1_700_000_000.5, 450.0, 502, "v1", run=run, error="no upstream answered",
                   charges=[Charge(A, "abandoned", 0.002)]))
    parent, (first, hedge) = split(exporter.get_finished_spans())
    assert (parent.status.status_code, parent.status.description) == (StatusCode.ERROR, "no upstream answered")
    assert (parent.start_time, parent.end_time) == (1_700_000_000_500_000_000, 1_700_000_000_950_000_000)
    p = dict(parent.attributes)
    assert (p["switchcraft.error"], p["switchcraft.cost_usd"], p["switchcraft.cost_estimated_usd"]) == (
        "no upstream answered", 0.002, 0.002)
    assert "switchcraft.answered_by" not in p and "switchcraft.agreement.verdict" not in p
    # Both end when the request did, each lasting its own latency; the lost hedge is no error, the 502 is.
    assert first.end_time == hedge.end_time == parent.end_time
    assert (first.end_time - first.start_time, hedge.end_time - hedge.start_time) == (300_000_000, 120_000_000)
    assert first.status.status_code is StatusCode.UNSET and hedge.status.status_code is StatusCode.ERROR
    assert first.attributes["switchcraft.call.estimated_cost_usd"] == 0.002
    assert "switchcraft.call.cost_usd" not in first.attributes and "gen_ai.usage.input_tokens" not in first.attributes
    assert first.attributes["switchcraft.breaker.state"] == "half_open"
    assert "switchcraft.breaker.state" not in hedge.attributes  # a model the breakers do not know
    # No upstream call at all: the request's span alone. After aclose nothing more is recorded.
    exporter.clear()
    tracing(Served("rid-2", None, 1_700_000_001.0, 3.0, 503, "v1", error="state store unavailable"))
    [only] = exporter.get_finished_spans()
    assert only.name == SPAN_NAME and "switchcraft.key_id" not in only.attributes
    asyncio.run(tracing.aclose())
    tracing(Served("rid-3", None, 1_700_000_002.0, 3.0, 200, "v1"))
    assert len(exporter.get_finished_spans()) == 1
