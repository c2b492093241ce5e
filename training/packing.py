"""Token packing: a whole tool-calling request into the encoder's window, deterministically.

    from training.packing import pack_request
    packed = pack_request(example.messages, example.tools, tokenizer, PackingSettings(max_tokens=512))
    packed.ids, packed.stats.as_dict()

Layout (always three segments, so positions mean the same thing in every request):

    [CLS] last user turn [SEP] tool signatures [SEP] other turns [SEP]

Priority when the request does not fit:
1. the last user turn; past its cap it keeps its beginning and end. The cap
   (`user_cap_fraction` of the window) only bites when tools or other turns
   need the room: a long question with nothing else fills the window;
2. the tools as signatures (training/signatures.py); if they do not all fit,
   the most relevant to the request first (word overlap, ties in given
   order), each whole, as many as fit; if not even one fits whole, the most
   relevant one is cut to the room left;
3. the other turns, most recent first, while they fit (stopping at the first
   that does not, so the kept history is contiguous), shown in their order.

Serving reuses this module unchanged; the stats record says what was cut.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from data.schema import Message, Tool
from training.config import PackingSettings
from training.signatures import relevance, tool_signature, words

N_SPECIAL = 4  # [CLS] + three [SEP]


@dataclass(frozen=True)
class PackStats:
    """What was kept and what was cut from one request."""

    budget: int
    n_tokens: int
    user_tokens: int  # the whole last user turn
    user_kept: int
    user_truncated: bool
    tools_total: int
    tools_kept: list[str] = field(default_factory=list)  # in the order packed
    tools_dropped: list[str] = field(default_factory=list)
    tool_truncated: bool = False
    tools_by_relevance: bool = False
    tool_tokens: int = 0
    turns_total: int = 0
    turns_kept: int = 0
    turn_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PackedRequest:
    ids: list[int]
    stats: PackStats


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of `text` without special tokens (no length warning: we cut ourselves)."""
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def special_ids(tokenizer) -> tuple[int, int]:
    cls = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if cls is None or sep is None:
        raise ValueError("the tokenizer has neither [CLS]/[SEP] nor BOS/EOS tokens; packing needs both")
    return cls, sep


def render_turn(message: Message) -> str:
    """One non-final turn as text: `role: content`, with calls and tool names spelled out."""
    if message.role == "tool":
        head = f"tool {message.name}:" if message.name else "tool:"
        return f"{head} {message.content or ''}".strip()
    text = f"{message.role}: {message.content or ''}".strip()
    for call in message.tool_calls:
        text += f" call {call.name}({json.dumps(call.arguments, ensure_ascii=False, separators=(',', ':'))})"
    return text


def last_user_index(messages: list[Message]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return i
    return None


def head_tail(ids: list[int], keep: int) -> list[int]:
    """The first and last tokens, `keep` in all (the beginning gets the extra one)."""
    if len(ids) <= keep:
        return list(ids)
    if keep <= 0:
        return []
    tail = keep // 2
    return ids[: keep - tail] + (ids[-tail:] if tail else [])


def as_messages(messages: list[Any]) -> list[Message]:
    return [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]


def as_tools(tools: list[Any] | None) -> list[Tool]:
    return [t if isinstance(t, Tool) else Tool.model_validate(t) for t in (tools or [])]


def pack_request(messages: list[Any], tools: list[Any] | None, tokenizer, settings: PackingSettings) -> PackedRequest:
    """Pack one request (messages and tools, as schema objects or dicts) into at most `max_tokens` ids."""
    messages, tools = as_messages(messages), as_tools(tools)
    cls_id, sep_id = special_ids(tokenizer)
    room = settings.max_tokens - N_SPECIAL

    ui = last_user_index(messages)
    user_ids = encode(tokenizer, messages[ui].content or "") if ui is not None else []
    others = [m for i, m in enumerate(messages) if i != ui]
    sigs = [
        tool_signature(t, description_words=settings.description_words, enum_values=settings.enum_values)
        for t in tools
    ]
    join = encode(tokenizer, ";")
    tool_units = [encode(tokenizer, s) + join for s in sigs]
    turn_units = [encode(tokenizer, render_turn(m)) for m in others]

    # 1. The last user turn: capped only as far as the rest needs the room.
    rest_need = sum(map(len, tool_units)) + sum(map(len, turn_units))
    user_room = max(int(settings.max_tokens * settings.user_cap_fraction), room - rest_need)
    user_kept = head_tail(user_ids, min(room, user_room))
    room -= len(user_kept)

    # 2. Tools: all in the given order when they fit; else most relevant first.
    order = list(range(len(tools)))
    by_relevance = sum(map(len, tool_units)) > room
    if by_relevance:
        request_words = words(" ".join(m.content or "" for m in messages))
        scores = [relevance(t, request_words) for t in tools]
        order.sort(key=lambda i: (-scores[i], i))
    kept_tools: list[int] = []
    tool_ids: list[int] = []
    tool_truncated = False
    for i in order:
        if len(tool_units[i]) <= room:
            kept_tools.append(i)
            tool_ids += tool_units[i]
            room -= len(tool_units[i])
    if not kept_tools and order and room > 0:
        i = order[0]
        kept_tools, tool_ids, tool_truncated = [i], tool_units[i][:room], True
        room -= len(tool_ids)

    # 3. Other turns, most recent first, while they fit; shown oldest first.
    kept_turns: list[int] = []
    for j in range(len(turn_units) - 1, -1, -1):
        if len(turn_units[j]) > room:
            break
        kept_turns.append(j)
        room -= len(turn_units[j])
    kept_turns.reverse()
    turn_ids = [t for j in kept_turns for t in turn_units[j]]

    ids = [cls_id, *user_kept, sep_id, *tool_ids, sep_id, *turn_ids, sep_id]
    stats = PackStats(
        budget=settings.max_tokens,
        n_tokens=len(ids),
        user_tokens=len(user_ids),
        user_kept=len(user_kept),
        user_truncated=len(user_kept) < len(user_ids),
        tools_total=len(tools),
        tools_kept=[tools[i].name for i in kept_tools],
        tools_dropped=[tools[i].name for i in range(len(tools)) if i not in kept_tools],
        tool_truncated=tool_truncated,
        tools_by_relevance=by_relevance,
        tool_tokens=len(tool_ids),
        turns_total=len(others),
        turns_kept=len(kept_turns),
        turn_tokens=len(turn_ids),
    )
    return PackedRequest(ids=ids, stats=stats)
