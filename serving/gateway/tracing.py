"""OpenTelemetry traces of served chat requests: one span per request, a child per upstream call.

    tracing = Tracing.from_settings(cfg.otel, breaker_state=lambda m: upstreams.breakers.of(m).current())
    tracing(served)           # an observer (serving/core/record.py): spans are made and ended at once
    await tracing.aclose()    # flush what is queued and shut the exporter down (the app's lifespan does this)

Built by serving/app.py only when `otel.endpoint` is set (configs/serving.yaml); otherwise this module and
the OpenTelemetry SDK are never imported. It has its own `TracerProvider` (the process's global one is left alone)
with `service.name` from `otel.service_name`, and exports over OTLP/HTTP (protobuf) to `otel.endpoint`, the full
traces URL (`http://collector:4318/v1/traces`), with `otel.headers`. Export never blocks a request: a
`BatchSpanProcessor` queues ended spans and a background thread sends them (a full queue drops spans, it never
waits). A given `exporter` (tests: the SDK's `InMemorySpanExporter`) is fed by a `SimpleSpanProcessor` instead.

The request span `switchcraft.chat` (kind SERVER) starts when the request arrived (`Served.started_at`) and lasts
`Served.duration_ms`. Attributes: `switchcraft.request_id`, `switchcraft.key_id` (the key's id, never the key),
`http.response.status_code`, `switchcraft.router_version`, `switchcraft.strategy.name` / `.kind` (what ran),
`switchcraft.agreement.verdict` (cascades), `switchcraft.answered_by` (= `gen_ai.response.model`),
`switchcraft.cost_usd` (what the key was charged, = the `x-switchcraft-cost-usd` header) and
`switchcraft.cost_estimated_usd`, `switchcraft.stream`, `switchcraft.error`; status ERROR for a 5xx.
A streamed native answer is charged when its stream ends, after this span: `switchcraft.cost_pending` is then true.

One child `chat <model>` (kind CLIENT) per upstream call in `Served.run.calls`: `gen_ai.request.model`,
`switchcraft.call.role` / `.outcome` / `.latency_ms` / `.cost_usd` (abandoned calls: `.estimated_cost_usd`) /
`.returned` / `.reasoning_tokens`, `http.response.status_code`, `gen_ai.usage.input_tokens` / `output_tokens`
(the answer's usage, when known); for a call that took part in an agreement check, `switchcraft.agreement.verdict`
(the run's), `switchcraft.agreement.agreed_with` / `.disagreed_with` (the other models) and
`switchcraft.disagreement.kind` (`data.verify.agree.disagreement_kind` of the first check it disagreed in; a check
with a silent model has none); and `switchcraft.breaker.state` of the model's endpoint as the request left it
(closed / half_open / open).

Child timings are reconstructed, not measured: a call's duration is its measured latency, exact, but the run
keeps no start times, so the calls are laid end to end in the order they were made (the first step's models,
role `first`, side by side, starting together; a hedge beside the call it hedges, ending together: the first answer
cancels the other) and the whole sequence is placed to end when the request ended (routing comes before the calls;
the answer is returned right after them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from serving.gateway.config import OtelSettings
from serving.core.record import Served
from serving.core.budget import ABANDONED

SPAN_NAME = "switchcraft.chat"
SCOPE = "switchcraft.gateway"
ESTIMATED_KINDS = ("abandoned", "estimated")  # ledger kinds that are estimates, not a provider's usage


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class Tracing:
    """An observer of served requests that turns each into a span tree (see the module docstring)."""

    def __init__(self, provider: TracerProvider, *, breaker_state: Callable[[str], str] | None = None) -> None:
        self.provider, self.breaker_state = provider, breaker_state
        self.tracer = provider.get_tracer(SCOPE)
        self.closed = False

    @classmethod
    def from_settings(cls, settings: OtelSettings, *, breaker_state: Callable[[str], str] | None = None,
                      exporter: SpanExporter | None = None) -> Tracing:
        """OTLP/HTTP to `settings.endpoint` through a batch processor; a given `exporter` is fed span by span."""
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: settings.service_name}),
                                  shutdown_on_exit=False)  # aclose() flushes; the process's exit is not ours
        if exporter is None:
            if not settings.endpoint:
                raise ValueError("otel.endpoint: traces need an OTLP/HTTP traces URL "
                                 "(e.g. http://collector:4318/v1/traces)")
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=settings.endpoint, headers=dict(settings.headers))))
        else:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider, breaker_state=breaker_state)

    def __call__(self, served: Served) -> None:
        if self.closed:
            return
        start = _ns(served.started_at)
        end = start + _ns(served.duration_ms / 1e3)
        span = self.tracer.start_span(SPAN_NAME, context=Context(), kind=SpanKind.SERVER, start_time=start,
                                      attributes=self.request_attributes(served))
        if served.status >= 500:
            span.set_status(Status(StatusCode.ERROR, served.error))
        run = served.run
        if run is not None and run.calls:
            parent = trace.set_span_in_context(span)
            windows = call_windows(run, end)
            for call, (t0, t1) in zip(run.calls, windows, strict=True):
                child = self.tracer.start_span(f"chat {call.model}", context=parent, kind=SpanKind.CLIENT,
                                               start_time=max(t0, start), attributes=self.call_attributes(run, call))
                if not call.ok and call.sent and call.outcome != "hedge_lost":  # a lost hedge was cancelled, not failed
                    child.set_status(Status(StatusCode.ERROR, call.outcome))
                child.end(end_time=max(t1, start))
        span.end(end_time=end)

    def request_attributes(self, served: Served) -> dict[str, Any]:
        run, meta = served.run, served.meta
        strategy = meta.get("strategy") or {}
        attrs: dict[str, Any] = {
            "switchcraft.request_id": served.request_id,
            "http.response.status_code": served.status,
            "switchcraft.router_version": served.router_version,
            "switchcraft.stream": served.stream,
            "switchcraft.cost_usd": served.cost_usd,
            "switchcraft.cost_estimated_usd": sum(c.usd for c in served.charges if c.kind in ESTIMATED_KINDS),
            "gen_ai.operation.name": "chat",
        }
        optional = {
            "switchcraft.key_id": served.key_id,
            "gen_ai.request.model": served.body.get("model") if isinstance(served.body.get("model"), str) else None,
            "switchcraft.routed": meta.get("routed"),
            "switchcraft.chosen": meta.get("chosen"),
            "switchcraft.strategy.name": run.strategy.name if run is not None else strategy.get("name"),
            "switchcraft.strategy.kind": run.strategy.kind if run is not None else strategy.get("kind"),
            "switchcraft.strategy.source": strategy.get("source"),
            "switchcraft.agreement.verdict": run.verdict if run is not None else None,
            "switchcraft.example_id": served.example_id,
            "switchcraft.error": served.error,
        }
        if run is not None:
            attrs["switchcraft.calls"] = sum(c.sent for c in run.calls)
            if run.returned is not None:
                optional.update({"switchcraft.answered_by": run.returned.model,
                                 "gen_ai.response.model": run.returned.model, "switchcraft.rule": run.rule})
                attrs["switchcraft.cost_pending"] = served.stream and run.returned.answer is None
        attrs.update({k: v for k, v in optional.items() if v is not None})
        return attrs

    def call_attributes(self, run, call) -> dict[str, Any]:
        a, usage = call.attempt, call.answer.usage if call.answer is not None else None
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": call.model,
                                 "switchcraft.call.role": call.role, "switchcraft.call.outcome": call.outcome,
                                 "switchcraft.call.returned": call is run.returned}
        if a is not None:
            attrs["switchcraft.call.latency_ms"] = round(a.latency_ms, 3)
            if a.status is not None:
                attrs["http.response.status_code"] = a.status
        if call.cost_usd is not None:
            attrs["switchcraft.call.cost_usd"] = call.cost_usd
        if call.abandoned_usd is not None and call.outcome in ABANDONED:
            attrs["switchcraft.call.estimated_cost_usd"] = call.abandoned_usd
        if usage is not None:
            for name, value in (("gen_ai.usage.input_tokens", usage.input_tokens),
                                ("gen_ai.usage.output_tokens", usage.output_tokens),
                                ("switchcraft.call.reasoning_tokens", usage.reasoning_tokens)):
                if value is not None:
                    attrs[name] = value
        attrs.update(agreement_attributes(run, call.model))
        if self.breaker_state is not None:
            try:
                attrs["switchcraft.breaker.state"] = self.breaker_state(call.model)
            except KeyError:  # a model the breakers do not know (not in the pool): no state to report
                pass
        return attrs

    async def aclose(self) -> None:
        """Export what is queued, then shut the exporter down (in a thread: the export is blocking I/O). With the
        collector unreachable this waits for the exporter's timeout (10 s; OTEL_EXPORTER_OTLP_TRACES_TIMEOUT)."""
        if self.closed:
            return
        self.closed = True
        await anyio.to_thread.run_sync(self.provider.shutdown)


def agreement_attributes(run, model: str) -> dict[str, Any]:
    """The agreement checks `model` took part in: the run's verdict, who it agreed and disagreed with, and how."""
    agreed, disagreed, kind = [], [], None
    took_part = False
    for check in run.checks:
        models = list(check.get("models") or [])
        if model not in models:
            continue
        took_part = True
        others = [m for m in models if m != model]
        (agreed if check.get("agree") else disagreed).extend(others)
        if not check.get("agree") and kind is None and check.get("kind") is not None:
            kind = check["kind"]
    if not took_part:
        return {}
    out: dict[str, Any] = {"switchcraft.agreement.agreed_with": agreed,
                           "switchcraft.agreement.disagreed_with": disagreed}
    if run.verdict is not None:
        out["switchcraft.agreement.verdict"] = run.verdict
    if kind is not None:
        out["switchcraft.disagreement.kind"] = kind
    return out


def call_windows(run, end_ns: int) -> list[tuple[int, int]]:
    """(start, end) in ns for each call: measured latencies, laid end to end, concurrent calls side by side, the
    last ending at `end_ns` (the run keeps no start times; see the module docstring)."""
    groups: list[list[int]] = []  # indices of calls made together
    for i, call in enumerate(run.calls):
        together = groups and (  # the first step's calls (role first) go out together; a hedge beside its call
            (call.role == "first" and run.calls[groups[-1][0]].role == "first") or call.role == "hedge")
        if together:
            groups[-1].append(i)
        else:
            groups.append([i])

    def latency_ns(i: int) -> int:
        a = run.calls[i].attempt
        return _ns(a.latency_ms / 1e3) if a is not None else 0

    spans = [max(latency_ns(i) for i in g) for g in groups]
    cursor = end_ns - sum(spans)
    out: list[tuple[int, int]] = [(0, 0)] * len(run.calls)
    for g, width in zip(groups, spans, strict=True):
        hedged = any(run.calls[i].role == "hedge" for i in g)
        for i in g:  # a hedge and its call end together (the first answer cancels the other); firsts start together
            start = cursor + width - latency_ns(i) if hedged else cursor
            out[i] = (start, start + latency_ns(i))
        cursor += width
    return out
