"""GET /v1/models, and model aliases: the names an agent client may ask for.

    aliases = Aliases.checked(cfg.aliases, pool.names)   # ValueError naming `aliases.<pattern>` for a bad target
    api = aliases.applied(anthropic_messages.API)         # its requests' `model` resolved before they are planned
    app.add_api_route("/v1/models", models_endpoint(gw), methods=["GET"])   # list_models(gw, request)

An alias maps a model name the pool does not have (an exact name or a glob,
`fnmatch` rules) to `router`, `router-<τ>` or a pool model; the first pattern
that matches wins, a pool model's own name is never aliased. The defaults
(serving/gateway/config.py `aliases`) send Claude Code's model names
(`claude-*`: its default and its small/fast model) and Codex CLI's (`gpt-*`,
`codex-*`) to `router`, so a base URL and a key are all a user of either must
set. Aliases apply on POST /v1/messages and /v1/responses (the agent clients'
APIs); Chat Completions callers name models exactly.

GET /v1/models lists `router` and the pool's models (those the key may use):
OpenAI's list `{object: "list", data: [{id, object: "model", created,
owned_by}]}`, or, for a caller sending an API's `models_header`, that API's
`models_body`: with an `anthropic-version` header (what the Anthropic client
sends) Anthropic's `{data: [{type: "model", id, display_name, created_at}],
has_more, first_id, last_id}`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import time
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from serving.gateway.admit import authenticate, request_id
from serving.gateway.apis import Api, Inbound, registry
from serving.core.errors import GatewayError, error_response
from serving.gateway.parts import Gateway
from serving.gateway.requests import ROUTER_MODEL

ROUTER = "router"


@dataclass(frozen=True)
class Aliases:
    rules: tuple[tuple[str, str], ...]
    pool: frozenset[str]

    @classmethod
    def checked(cls, aliases: dict[str, str], pool_names: list[str]) -> Aliases:
        for pattern, target in aliases.items():
            if not ROUTER_MODEL.fullmatch(target) and target not in pool_names:
                raise ValueError(f"aliases.{pattern}: {target!r} is neither 'router', 'router-<threshold>' nor a "
                                 f"pool model ({', '.join(pool_names)})")
        return cls(tuple(aliases.items()), frozenset(pool_names))

    def resolve(self, model: object) -> object:
        """The name the gateway plans `model` as: itself unless it is no pool model and an alias matches."""
        if not isinstance(model, str) or model in self.pool or ROUTER_MODEL.fullmatch(model):
            return model
        return next((target for pattern, target in self.rules if fnmatch.fnmatchcase(model, pattern)), model)

    def applied(self, api: Api) -> Api:
        """`api` whose requests' `model` is resolved as soon as the body is translated."""

        def inbound(body: dict) -> Inbound:
            out = api.inbound(body)
            out.body["model"] = self.resolve(out.body.get("model"))
            return out

        return dataclasses.replace(api, inbound=inbound)


def models_endpoint(gw: Gateway):
    """GET /v1/models on these parts (registered by create_app)."""

    async def endpoint(request: Request) -> Response:
        return await list_models(gw, request)

    return endpoint


def caller_api(request: Request) -> Api:
    """The API whose `models_header` the request sends (Messages: `anthropic-version`), else Chat Completions."""
    return next((api for api in registry.apis() if api.models_header and api.models_header in request.headers),
                Api())


async def list_models(gw: Gateway, request: Request) -> Response:
    """GET /v1/models in the caller's API: Anthropic's when it sends `anthropic-version`, else OpenAI's."""
    started, rid = time.perf_counter(), request_id(request)
    api = caller_api(request)
    ident = None
    try:
        key = request.headers.get(api.key_header) if api.key_header else None
        ident = await authenticate(gw, request, f"Bearer {key}" if key else None)
    except GatewayError as e:
        gw.finish("models", e.status, started, rid, ident, error=e.param)
        return error_response(e, rid, shape=api.error_body)
    keyed = ident.limits.models
    names = [ROUTER, *(m for m in gw.pool.names if keyed is None or m in keyed)]
    gw.finish("models", 200, started, rid, ident, n_models=len(names))
    return JSONResponse(api.models_body(names), headers={"x-request-id": rid})
