"""The gateway's inbound halves of the wire APIs: each API it accepts, registered under its wire API's name.

    from serving.gateway.apis import registry
    for api in registry.apis():        # Chat Completions, Messages, Responses: each one's route (serving/app.py)
        ...
    registry.get("anthropic_messages")  # UnknownNameError naming the known APIs

A module of this package registers its `Api` at import (`register(Api(...))`);
the name must be a wire API of data/wire/registry.py (its outbound
half), so each API is known by one name on both sides. Every module here but
the helpers in NOT_APIS is imported on the first lookup, so a new API is a new
file.
"""

from __future__ import annotations

import functools

from data.wire import registry as wire
from data.registry import Registry, import_modules
from serving.gateway.apis import Api

NOT_APIS = {"models", "registry", "responses_tools", "tokens"}  # the package's helpers, not APIs
INBOUND: Registry[Api] = Registry("inbound wire API")


def register(api: Api) -> Api:
    """Add `api` under its wire API's name; ValueError when that name is no wire API or is taken here."""
    if api.name not in wire.load():
        raise ValueError(f"inbound API {api.name!r} ({api.path}) has no wire API of that name "
                         f"(data/wire/); known: {', '.join(wire.names())}")
    INBOUND.add(api.name, api)
    return api


@functools.cache
def load() -> Registry[Api]:
    """Import every API module of this package once (each registers itself); the registry."""
    import_modules(__package__, NOT_APIS)
    return INBOUND


def get(name: str) -> Api:
    """The inbound API registered as `name`; UnknownNameError (a KeyError) listing the known ones."""
    return load().get(name)


def names() -> list[str]:
    """Every registered inbound API's name, sorted."""
    return sorted(load().names())


def apis() -> list[Api]:
    """Every registered inbound API, by name."""
    return [get(n) for n in names()]
