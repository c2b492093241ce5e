"""Long request text cut to what packing can use before it is tokenized, so a 2 MB body routes like a 2 KB one.

    encoder = CappedEncoder(RequestEncoder.from_dir(path))     # RouterClient does this
    ids, meta = encoder.encode(messages, tools)                 # as RequestEncoder.encode, on the cut request

Packing (training/packing.py) keeps at most `max_tokens` (512) ids of a
request: of the last user turn its first and last tokens, of every other
string a whole unit or nothing. Yet it, and the metadata features
(training/metadata.py), tokenize and scan every string whole: a 1.95 MB
message was tokenized about four times (4.4-4.8 s per request on /v1/route).
Here every string longer than `cut_chars` (message contents, tool
descriptions, an earlier call's arguments) is cut to its first and last
`cut_chars / 2` characters before any of that runs. 4,096 characters of text
are ~800-1,000 tokens, over the 508 + 100 that packing's head and tail
can take plus one word cut at the seam, so the packed ids are the same as
the whole text's (tests/serving/test_long_input.py checks it on real
requests and on long ones). Requests with no string that long are passed on
untouched, token for token what the router was trained on.

What the cut changes, for texts beyond it only: the metadata that counts the
whole text (`total_tokens`, `user_tokens`, numbers, commas, … of the question)
counts the cut text, so they saturate at ~8 K characters' worth of each such
string; and text made of words longer than ~100 characters
(one token each) may pack differently from the whole.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from data.schema import Message, Tool
from training.packing import as_messages, as_tools

CUT_CHARS = 8_192


def cut_text(text: str, limit: int = CUT_CHARS) -> str:
    """`text` if it is at most `limit` characters; else its first and last `limit // 2`, joined by a space."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + " " + text[-half:]


def _cut_message(m: Any, limit: int) -> Any:
    if not isinstance(m, Message):
        return m
    update: dict[str, Any] = {}
    if m.content is not None and len(m.content) > limit:
        update["content"] = cut_text(m.content, limit)
    calls = []
    for call in m.tool_calls:
        rendered = json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
        # An argument blob this long never fits the window; only its size reaches the metadata.
        calls.append(call.model_copy(update={"arguments": {"…": cut_text(rendered, limit)}})
                     if len(rendered) > limit else call)
    if any(c is not o for c, o in zip(calls, m.tool_calls)):
        update["tool_calls"] = calls
    return m.model_copy(update=update) if update else m


def _cut_tool(t: Any, limit: int) -> Any:
    if not isinstance(t, Tool) or len(t.description) <= limit:
        return t
    description = cut_text(t.description, limit)
    original = {**t.original, "description": description} if isinstance(t.original, dict) and "description" in t.original else t.original
    return t.model_copy(update={"description": description, "original": original})


def cut_request(messages: list[Any], tools: list[Any] | None, limit: int = CUT_CHARS) -> tuple[list[Any], list[Any] | None]:
    """The request with every string over `limit` characters cut (the same objects when none is)."""
    return [_cut_message(m, limit) for m in as_messages(messages)], [_cut_tool(t, limit) for t in as_tools(tools)]


class CappedEncoder:
    """A RequestEncoder (training/export.py) whose `encode` cuts long strings first; everything else is its own."""

    def __init__(self, encoder: Any, cut_chars: int = CUT_CHARS) -> None:
        if cut_chars < 2048:
            raise ValueError(f"cut_chars {cut_chars} is too short to keep packing's head and tail (≥ 2048)")
        self.encoder, self.cut_chars = encoder, cut_chars

    def encode(self, messages: list[Any], tools: list[Any] | None) -> tuple[list[int], np.ndarray]:
        return self.encoder.encode(*cut_request(messages, tools, self.cut_chars))

    def batch(self, requests, pad_to: int | None = None) -> dict[str, np.ndarray]:
        from training.export import pad_batch

        return pad_batch([self.encode(m, t) for m, t in requests], self.encoder.pad_id, pad_to)

    def __getattr__(self, name: str) -> Any:  # tokenizer, packing, pad_id, info, scaler: the wrapped encoder's
        return getattr(self.encoder, name)
