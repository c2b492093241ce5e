"""The wire-API registry: every provider API the project speaks, each one module and one registration.

    from data.wire import registry
    wire = registry.get("anthropic_messages")   # UnknownNameError naming the known APIs
    registry.names()                            # ['anthropic_messages', 'openai_chat', 'openai_responses']

A module of this package registers its API at import (`register(WireApi(...))`):
its name (a pool model's `api:`), the path a provider serves it at, the request
built from a chat request, the answer decoded into a chat completion, its
stream's events decoded into chat chunks, and the answer the replay server
gives for a recorded output (and its stream). Every module here but `common`
and `registry` is imported on the first lookup, so a new API is a new file.
The gateway's inbound half of an API (serving/gateway/apis/) registers under
the same name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from data.registry import Registry, import_modules

JSON = dict[str, Any]
NOT_APIS = {"common", "raw", "registry"}  # the package's helpers, not APIs


class ChunkDecoder(Protocol):
    """A native stream's events → chat.completion.chunk dicts; `done` turns true at the stream's last event."""

    done: bool

    def feed(self, kind: str | None, data: JSON) -> list[JSON]: ...


def same(body: JSON) -> JSON:
    return body


@dataclass(frozen=True)
class WireApi:
    """One provider API: how a chat request is sent in it and how its answers are read back (and replayed)."""

    name: str  # a pool model's `api:`
    path: str  # after the model's base_url (which ends at the version, `…/v1`): "/messages"
    request: Callable[[JSON], JSON]  # a chat request → this API's request body
    answer: Callable[[JSON], JSON]  # this API's answer (a JSON object) → a chat completion; WireError if not one
    reply: Callable[[JSON, JSON], JSON]  # (a chat completion, the request asked) → this API's answer body
    match_view: Callable[[JSON], JSON] = same  # a request as the replay index matches it: metadata, user texts, tools
    stream: Callable[[], ChunkDecoder] | None = None  # its stream's decoder; None: its events are chat chunks
    events: Callable[[JSON], Iterator[bytes]] | None = None  # a `reply` body as this API's SSE; None: JSON only
    parse: Callable[[bytes | str], tuple[Any, Any, JSON]] | None = None  # a whole body → (raw, usage, chat)
    key_header: str | None = None  # the header carrying the key (None: `Authorization: Bearer`)
    headers: Mapping[str, str] = field(default_factory=dict)  # sent with every request (an API version)

    def auth_headers(self, key: str | None) -> dict[str, str]:
        """The key where this API expects it, and the API's own headers."""
        if self.key_header is None:
            return {**self.headers, **({"authorization": f"Bearer {key}"} if key else {})}
        return {**self.headers, **({self.key_header: key} if key else {})}


WIRE_APIS: Registry[WireApi] = Registry("wire API")


def register(api: WireApi) -> WireApi:
    """Add `api` (ValueError when its name is taken)."""
    WIRE_APIS.add(api.name, api)
    return api


@functools.cache
def load() -> Registry[WireApi]:
    """Import every API module of this package once (each registers itself); the registry."""
    import_modules(__package__, NOT_APIS)
    return WIRE_APIS


def get(name: str) -> WireApi:
    """The API registered as `name`; UnknownNameError (a KeyError) listing the known ones."""
    return load().get(name)


def names() -> list[str]:
    """Every registered API's name, sorted (modules register in import order)."""
    return sorted(load().names())
