"""POST /v1/messages/count_tokens and POST /v1/responses/input_tokens: a request's input tokens, estimated.

    client.messages.count_tokens(model="router", messages=[…], tools=[…])   # {"input_tokens": N}
    client.responses.input_tokens.count(model="router", input=[…])        # {"object": "response.input_tokens", …}

Each registered API with a `count_path` has one (serving/app.py), answering in
its `count_body`. The body is translated as its API's POST would be: the
system prompt, messages and tools of the chat request the gateway routes. The
estimate is the gateway's own, the one its reservations use: that request's
messages and tools as compact JSON, in bytes, divided by `state.chars_per_token`
(default 3), rounded up. No tokenizer is run: each pool model has its own, and
the router has not picked one yet; 3 bytes per token over-counts typical
English and JSON (about 4 for current tokenizers), which is the safe side for a
client deciding when to compact its context. No upstream is called and nothing
is charged; the key is authenticated and its request-rate limit counts the call.
"""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from serving.gateway.admit import authenticate, read_body, request_id
from serving.gateway.apis import Api
from serving.core.budget import payload_size, tokens_in
from serving.core.errors import GatewayError, error_response
from serving.gateway.parts import Gateway


def counter(gw: Gateway, api: Api):
    """The endpoint counting `api`'s requests (at its `count_path`); `api.count_body(n)` answers n tokens."""
    endpoint = f"{api.endpoint}_count_tokens"

    async def count(request: Request) -> Response:
        started, rid = time.perf_counter(), request_id(request)
        ident = None
        try:
            key = request.headers.get(api.key_header) if api.key_header else None
            ident = await authenticate(gw, request, f"Bearer {key}" if key else None)
            body = await read_body(gw, request)
            chat = api.inbound({"max_tokens": 1, **body}).body  # a count takes no max_tokens; the POST needs one
        except GatewayError as e:
            gw.finish(endpoint, e.status, started, rid, ident, error=e.message if e.status >= 500 else e.param)
            return error_response(e, rid, shape=api.error_body)
        n = tokens_in(payload_size({k: chat[k] for k in ("messages", "tools") if k in chat}),
                      gw.cfg.state.chars_per_token)
        gw.finish(endpoint, 200, started, rid, ident, input_tokens=n)
        return JSONResponse(api.count_body(n), headers={"x-request-id": rid})

    return count

