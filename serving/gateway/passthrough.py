"""A Messages or Responses request planned on one model: its own body passed through, or its stream live.

    single = choose(gw, at, inbound.body, sent, request.headers)   # after the plan: True when it runs as one call
    response = answer(gw, at, out, charged, headers, sent)          # the answer in the caller's API

serving/gateway/chat.py `serve` plans every API's request on its translated
(Chat Completions) form: routing, tool routing, sessions, the hold. Then, when
the plan's strategy is one model (its fallbacks after it):

- **passed through**: the model's provider speaks the caller's API (its pool
  `api:`) and it is a native model (not prompt style, whose functions must be
  written into its prompt). The caller's body goes upstream as it was sent —
  every field, block and tool — with only `model` the pool's model_id, with
  tool routing its tools replaced by the routed set (in the API's own form, the
  wire API's mapping), and the output cap the hold was priced at
  (the caller's when it gave one: serving/core/budget.py), with the caller's
  version and beta headers of that API (`PassThrough.headers`). The provider's
  JSON comes back as it sent it, plus `switchcraft` (the trace and what was
  charged) and the `x-switchcraft-*` headers; its stream is relayed event by
  event (serving/gateway/live.py `relay`), the trace in its last event. The
  answer is still decoded into the chat form for the money, the trace, the
  decision log and the session. The provider enforces tool_choice itself. A
  fallback that does not speak the caller's API is asked translated.
- **streamed live** (any other single-model stream): the model's stream, read as
  chat chunks, is rendered in the caller's API as it comes (`translated`).

A plan that needs the translated answer whole keeps today's path (the finished
answer, as JSON or as events): an agreement cascade; a stream whose calls must be
checked first (a constrained tool_choice; tool routing that drops or refuses
calls of tools it did not show, `tools.rejected_calls` other than `pass`); a
prompt-style model (read whole, whatever the route). With tool routing, a
routed tool whose name a provider would not take as it is (a catalog's
`namespace.name`: the translated path renames it and maps the calls back) keeps
the request translated; a passed-through answer whose calls name a tool the
tool router did not show, under `drop` or `refuse`, goes back translated,
without them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from data import wire
from data.pool import PoolModel
from data.pool_runner.request import openai_function_name, output_cap
from serving.core.budget import StreamCharge
from serving.gateway.answers import upstream_body
from serving.gateway.apis import Api, Reply
from serving.gateway.live import relay, translated
from serving.gateway.parts import Gateway
from serving.gateway.streams import sse_passthrough
from serving.gateway.tool_choice import ToolChoice
from serving.gateway.upstream import Native, UpstreamResult
from training.policy.kinds import kind_of

# `at` is the request so far (serving/gateway/chat.py `Pending`), `at.plan` its `Plan`, `out` its `Outcome`: typed
# Any here, since chat.py imports this module.
Pending = Plan = Outcome = Any
OWN_FIELD = "switchcraft"  # the gateway's own object in a body: never sent upstream


def speaks(model: PoolModel, api: Api) -> bool:
    """Does `model` take `api`'s body as it is: its provider speaks the API, and it is asked natively."""
    return model.api == api.name and model.prompt_style == "native"


def choose(gw: Gateway, at: Pending, sent: dict[str, Any], headers) -> bool:
    """How a translated API's planned request runs: True when as one call (passed through, or streamed live),
    False for the strategy's run. `sent`: the caller's body; `headers`: its request headers."""
    p, api = at.plan, at.api
    if api.reply is None or not kind_of(p.ran).answers_as_written:
        return False
    live = gw.tools is None or gw.tools.rejected == "pass"  # else a stream's calls are checked before it is sent
    native = api.passthrough is not None and speaks(gw.pool.get(p.ran.first[0]), api) and (not at.stream or live) \
        and all(openai_function_name(t.name) == t.name for t in (p.asked.tools if p.asked.tooled else []))
    streamed = at.stream and live and api.live is not None and not ToolChoice.of(p.body).constrained
    if native:
        p.native = native_bodies(gw, p, api, sent, headers)
    if streamed:  # the translated models' payloads stream too (upstream_body asks for the usage chunk)
        p.body = {**p.body, "stream": True}
    return native or streamed


def native_bodies(gw: Gateway, p: Plan, api: Api, sent: dict[str, Any], headers) -> Callable[[str], Native | None]:
    """Per model of the plan, the caller's body as that model takes it (None: it does not speak the API)."""
    body = {k: v for k, v in sent.items() if k != OWN_FIELD}
    forwarded = {h: headers[h] for h in api.passthrough.headers if h in headers}
    p.meta["passthrough"] = {"models": [m for m in p.ran.models if speaks(gw.pool.get(m), api)],
                             "headers": sorted(forwarded)}

    def body_for(model: str) -> Native | None:
        m = gw.pool.get(model)
        if not speaks(m, api):
            return None
        cap = output_cap(p.body, m, gw.cfg.state.default_output_tokens)  # the caller's, else what the hold priced
        out = body
        if p.asked.tooled is not None:  # the routed set, as the translated path offers it, in the API's own form
            offered = upstream_body({"messages": []}, p.asked.tools, m).get("tools") or []
            out = api.passthrough.routed(body, wire.native_request(m.api, {"messages": [], "tools": offered})
                                         .get("tools") or [])
        return Native({**out, "model": m.endpoint_model, api.passthrough.cap_field: cap}, forwarded)

    return body_for


def answer(gw: Gateway, at: Pending, out: Outcome, charged: list, headers: dict[str, str],
           caller_body: dict[str, Any]) -> Response:
    """A translated API's answer: the provider's own JSON (passed through), a stream relayed or rendered live, or
    the chat answer in the caller's API (JSON or the finished answer's events)."""
    p, rec, result = at.plan, out.run.returned, out.upstream
    reply = Reply(rec.answer.body if rec.answer is not None else {}, rec.model, p.meta, charged, headers, at.stream,
                  caller_body, at.rid)
    if result is not None and result.response is not None:
        return stream(gw, at, rec, result, reply)
    native = result.extra.get("native_body") if result is not None else None
    if native is not None and not at.stream and not withheld(gw, p):
        return JSONResponse({**native, OWN_FIELD: reply.trace()}, headers=headers)
    return at.api.reply(reply)


def withheld(gw: Gateway, p: Plan) -> bool:
    """Did tool routing take calls out of the answer (`tools.rejected_calls` drop or refuse)?"""
    tooling = p.meta.get("tool_routing")
    return bool(tooling and tooling.get("rejected_calls")) and gw.tools is not None and gw.tools.rejected != "pass"


def stream(gw: Gateway, at: Pending, rec, result: UpstreamResult, reply: Reply) -> StreamingResponse:
    """The upstream's open stream (`rec`'s call) to the caller as it comes, charged when it ends
    (serving/core/budget.py `StreamCharge`; a stream that never ran is closed and charged after the response)."""
    p = at.plan
    settle = StreamCharge(gw.budgets, gw.pool, gw.cfg.state, at.ident, at.res, reply.charged, rec, at.rid,
                          p.payloads.get(result.model, {}), response=result.response)
    if result.extra.get("native_stream"):
        events = relay(result, gw.pool.get(result.model).api, at.api.passthrough, settle,
                       lambda charged: replace(reply, charged=charged).trace())
    else:
        got: list = []

        async def on_end(usage, output_bytes, *, abandoned: bool = False) -> list:
            got[:] = await settle(usage, output_bytes, abandoned=abandoned)
            return got

        events = translated(sse_passthrough(result, p.meta, p.asked.tools, on_end=on_end), at.api.live(reply),
                            lambda: list(got))
    return StreamingResponse(events, media_type="text/event-stream", headers=reply.headers,
                             background=BackgroundTask(settle.ensure))
