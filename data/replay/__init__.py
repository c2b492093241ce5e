"""A replay LLM endpoint: `/v1/chat/completions`, `/v1/messages` and `/v1/responses` answered from real recorded
outputs.

    switchcraft pool replay-server --outputs ../shared/data/bfcl_v1_pool_outputs_2024-08-11 --port 8099

Each request is answered with the recorded output and usage of the named
model for that query (found by `metadata.example_id`, else by question text),
formatted as an OpenAI chat completion (`data.wire.raw`). The model
is the request's `model` (a recording name, or a pool model id via
`aliases`), or the path `/models/<recording>/v1/chat/completions`. The path
says the API: each registered wire API (data/wire/registry.py:
Chat Completions, Anthropic Messages, OpenAI Responses) is served at its own
path, the request is matched the same way in each (its `match_view`) and the
recording answered in that API's shape (its `reply`), as that API's SSE events
when it asks to `stream` (Chat Completions answers JSON whatever it asks). A
recording without token counts is answered without `usage`. Messages requests
may carry their key in `x-api-key` (the API's `key_header`).

It behaves like a billing provider: each generated answer is a *completion*;
a request with an `Idempotency-Key` it has already answered is replayed from
cache, not generated again. `/_replay/stats` counts requests and completions
per (model, example) for tests. Faults (`Faults`) are injected per request,
decided by a hash of (seed, call, attempt) so runs are reproducible however
requests interleave.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from data import wire
from data.wire import registry
from data.wire.raw import message_from_raw, usage_to_wire
from data.replay.recordings import ExampleIndex, Recordings


class Faults(BaseModel):
    """Probabilities (per request) of each fault, and how faults behave."""

    model_config = ConfigDict(extra="forbid")

    rate_429: float = Field(default=0.0, ge=0, le=1)
    rate_500: float = Field(default=0.0, ge=0, le=1)
    rate_slow: float = Field(default=0.0, ge=0, le=1)
    rate_drop: float = Field(default=0.0, ge=0, le=1)
    rate_reject: float = Field(default=0.0, ge=0, le=1, description="Refuse the request itself (reject_status).")
    reject_status: int = Field(default=400, ge=400, le=499, description="The status of a rejection: 400, 413, 422…")
    rate_bad_body: float = Field(default=0.0, ge=0, le=1, description="Answer 200 with a body that is not a completion.")
    retry_after_s: float = Field(
        default=1.0, ge=0, description="Sent as Retry-After (whole seconds, rounded up)."
    )
    retry_after_ms: int | None = Field(
        default=None, ge=0, description="Also sent as retry-after-ms, as OpenAI does."
    )
    slow_s: float = Field(default=2.0, ge=0, description="How long a slow answer takes.")
    latency_s: float = Field(default=0.0, ge=0, description="Added to every answer.")
    max_faults_per_call: int = Field(
        default=2, ge=0, description="After this many faulty attempts a call succeeds."
    )
    seed: int = 0

    def pick(self, call_key: str, attempt: int) -> str | None:
        if attempt >= self.max_faults_per_call:
            return None
        u = (
            int.from_bytes(
                hashlib.sha256(f"{self.seed}|{call_key}|{attempt}".encode()).digest()[:8], "big"
            )
            / 2**64
        )
        for kind, rate in (
            ("429", self.rate_429),
            ("500", self.rate_500),
            ("slow", self.rate_slow),
            ("drop", self.rate_drop),
            ("reject", self.rate_reject),
            ("bad_body", self.rate_bad_body),
        ):
            if u < rate:
                return kind
            u -= rate
        return None


@dataclass
class ReplayState:
    recordings: Recordings
    index: ExampleIndex
    aliases: dict[str, str] = field(default_factory=dict)  # endpoint model id -> recording name
    faults: Faults = field(default_factory=Faults)
    api_key: str | None = None
    requests: Counter = field(default_factory=Counter)  # (model, example) -> HTTP requests
    completions: Counter = field(
        default_factory=Counter
    )  # (model, example) -> answers generated (billed)
    events: list[dict] = field(default_factory=list)
    _attempts: Counter = field(default_factory=Counter)
    _idempotent: dict[str, tuple[tuple[str, str], str]] = field(
        default_factory=dict
    )  # key -> (call, answer)
    # The server thread writes the counters while a test thread reads them.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear(), self.completions.clear(), self.events.clear()
            self._attempts.clear(), self._idempotent.clear()

    def counts(self) -> tuple[Counter, Counter]:
        """Copies of (requests, completions) per (model, example), safe while serving."""
        with self.lock:
            return Counter(self.requests), Counter(self.completions)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return self._stats()

    def _stats(self) -> dict[str, Any]:
        kinds = Counter(e["outcome"] for e in self.events)
        return {
            "requests": sum(self.requests.values()),
            "completions": sum(self.completions.values()),
            "outcomes": dict(kinds),
            "per_call": {
                f"{m}|{e}": [self.requests[(m, e)], self.completions[(m, e)]]
                for m, e in self.requests
            },
            "events": list(self.events),
            "faults": self.faults.model_dump(),
        }


def _error(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}},
        status_code=status,
        headers=headers,
    )


class DroppedConnection(Response):
    """Starts a response, sends part of it, then fails: the server closes the connection mid-body."""

    async def __call__(self, scope, receive, send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"id": "chatcmpl-', "more_body": True})
        raise ConnectionAbortedError("replay: injected dropped connection")


def completion_body(
    model: str, example_id: str, raw: Any, usage_wire: dict | None
) -> dict[str, Any]:
    message = message_from_raw(raw)
    body = {
        "id": "chatcmpl-" + hashlib.sha1(f"{model}|{example_id}".encode()).hexdigest()[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
    }
    if usage_wire is not None:
        body["usage"] = usage_wire
    return body


def native_body(api: str, chat: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (`completion_body`) as `api`'s answer; `asked`: the request (Responses echo its fields).
    A recording without token counts is answered without `usage`."""
    out = registry.get(api).reply(chat, asked)
    if chat.get("usage") is None:
        out.pop("usage", None)
    return out


def answer_response(api: str, payload: str, stream: bool) -> Response:
    """The stored answer: JSON, or the API's stream of it (an API without its own events answers JSON)."""
    events = registry.get(api).events
    if not stream or events is None:
        return Response(payload, media_type="application/json")
    chunks = events(json.loads(payload))

    async def each():
        for chunk in chunks:
            yield chunk

    return StreamingResponse(each(), media_type="text/event-stream")


def _refused_key(state: ReplayState, request: Request, api: str) -> Response | None:
    """The 401 for a request without the server's key (in `Authorization: Bearer`, or the API's own header)."""
    if state.api_key is None:
        return None
    given = request.headers.get("authorization", "").removeprefix("Bearer ")
    header = registry.get(api).key_header
    if header is not None and header in request.headers:
        given = request.headers[header]
    if given == state.api_key:
        return None
    # Real providers quote the key they got; the runner must redact it.
    return _error(401, f"Incorrect API key provided: {given}.", "invalid_request_error")


def _recording(state: ReplayState, body: dict, recording: str | None, api: str):
    """(recording name, example id, the recording) the request asks for, or the 404 saying why there is none."""
    name = recording or state.aliases.get(body.get("model"), body.get("model"))
    if name not in state.recordings:
        return _error(404, f"model {body.get('model')!r} is not recorded; recorded: {sorted(state.recordings)}",
                      "not_found")
    example_id = state.index.match(wire.match_view(api, body))
    rec = state.recordings[name].get(example_id) if example_id else None
    if rec is None:
        return _error(404, f"no recording of {name} for this request (example {example_id})", "not_found")
    return name, example_id, rec


def _fault_response(state: ReplayState, fault: str | None, log: Callable[[str], None]) -> Response | None:
    """The injected failure answered instead of the recording (429, 500, a rejection, a body that is no answer)."""
    if fault == "429":
        log("429")
        headers = {"retry-after": str(int(-(-state.faults.retry_after_s // 1)))}
        if state.faults.retry_after_ms is not None:
            headers["retry-after-ms"] = str(state.faults.retry_after_ms)
        return _error(429, "Rate limit reached (replay fault injection).", "rate_limit_error", headers)
    if fault == "500":
        log("500")
        return _error(500, "The server had an error (replay fault injection).", "server_error")
    if fault == "reject":
        log(str(state.faults.reject_status))
        return _error(state.faults.reject_status, "Invalid request (replay fault injection).",
                      "invalid_request_error")
    if fault == "bad_body":
        log("bad_body")
        return Response(b"<html>upstream proxy error</html>", media_type="text/html")
    return None


def _payload(state: ReplayState, call: tuple[str, str], key: str | None, rec, body: dict, api: str,
             log: Callable[[str], None]) -> str | Response:
    """The answer's JSON: replayed for an Idempotency-Key already answered, else generated (and billed)."""
    if key and key in state._idempotent:
        bound, payload = state._idempotent[key]
        if bound != call:
            return _error(422, "Idempotency-Key reused for a different request", "invalid_request_error")
        log("idempotent_replay")
        return payload
    # The answer is generated (and billed) here, whatever happens to the connection next.
    name, example_id = call
    chat = completion_body(body.get("model", name), example_id, rec.raw, usage_to_wire(rec.usage))
    payload = json.dumps(native_body(api, chat, body))
    with state.lock:
        state.completions[call] += 1
        if key:
            state._idempotent[key] = (call, payload)
    log("completion")
    return payload


async def answer(state: ReplayState, request: Request, recording: str | None, api: str = "openai_chat") -> Response:
    """One request of `api`: its recording, in that API's shape (or the fault drawn for this attempt)."""
    if (refused := _refused_key(state, request, api)) is not None:
        return refused
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _error(400, "request body is not JSON", "invalid_request_error")
    found = _recording(state, body, recording, api)
    if isinstance(found, Response):
        return found
    name, example_id, rec = found
    key = request.headers.get("idempotency-key")
    call_key = key or f"{name}|{example_id}"
    with state.lock:
        attempt = state._attempts[call_key]
        state._attempts[call_key] += 1
        state.requests[(name, example_id)] += 1
    fault = state.faults.pick(call_key, attempt)
    event = {"t": time.time(), "model": name, "example_id": example_id, "key": key, "attempt": attempt, "api": api}

    def log(outcome: str) -> None:
        with state.lock:
            state.events.append({**event, "outcome": outcome})

    if (failed := _fault_response(state, fault, log)) is not None:
        return failed
    payload = _payload(state, (name, example_id), key, rec, body, api, log)
    if isinstance(payload, Response):
        return payload
    delay = state.faults.latency_s + (state.faults.slow_s if fault == "slow" else 0.0)
    if delay:
        await asyncio.sleep(delay)
    if fault == "slow":
        log("slow")  # answered late; the client may have given up already
    if fault == "drop":
        log("drop")
        return DroppedConnection()
    return answer_response(api, payload, body.get("stream") is True)


def create_app(state: ReplayState) -> FastAPI:
    """The replay endpoint: each registered wire API at `/v1<its path>` and `/models/<recording>/v1<its path>`."""
    app = FastAPI(title="switchcraft replay endpoint")

    def in_api(api: str):
        async def endpoint(request: Request, recording: str | None = None) -> Response:
            return await answer(state, request, recording, api)

        return endpoint

    for api in registry.names():
        path = registry.get(api).path
        app.add_api_route("/v1" + path, in_api(api), methods=["POST"])
        app.add_api_route("/models/{recording}/v1" + path, in_api(api), methods=["POST"])

    @app.get("/v1/models")
    async def models() -> dict:
        return {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "owned_by": "replay"} for m in sorted(state.recordings)
            ],
        }

    @app.get("/_replay/stats")
    async def stats() -> dict:
        return state.stats()

    @app.post("/_replay/reset")
    async def reset() -> dict:
        state.reset()
        return {"ok": True}

    @app.post("/_replay/faults")
    async def set_faults(faults: Faults) -> dict:
        state.faults = faults
        return faults.model_dump()

    return app
