"""OpenAI Chat Completions (POST /v1/chat/completions): the internal chat shape itself.

A request is sent as it is, an answer read as it is (it must have `choices`),
a stream's `data: {chunk}` events passed through; the replay server answers a
recorded output as the chat completion it was recorded as (JSON, even when
asked to stream). The whole body is parsed by data.wire.raw.
"""

from __future__ import annotations

from typing import Any

from data.wire.registry import WireApi, register, same
from data.wire.raw import WireError, parse_completion


def chat_answer(data: dict[str, Any]) -> dict[str, Any]:
    """A chat completion as it is; WireError when it has no `choices` list."""
    if not isinstance(data.get("choices"), list):
        raise WireError("response has no choices")
    return data


def recorded(chat: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    return chat


WIRE = register(WireApi("openai_chat", "/chat/completions", same, chat_answer, recorded, parse=parse_completion))
