"""Long strings are cut before tokenizing, and packing still keeps the same tokens (serving/long_input.py).

    .venv/bin/python -m pytest -q tests/serving/test_long_input.py
"""

from __future__ import annotations

import numpy as np
import pytest

from data.schema import Call, Message, Tool
from serving.long_input import CUT_CHARS, CappedEncoder, cut_request, cut_text
from tests.routers import bfcl_sample
from training.export import RequestEncoder
from training.packing import pack_request


@pytest.fixture(scope="module")
def encoders(tiny_router_dir):  # noqa: F811
    whole = RequestEncoder.from_dir(tiny_router_dir)
    return whole, CappedEncoder(whole)


def test_normal_requests_encode_exactly_as_training_packs_them(encoders, shared_data):
    whole, capped = encoders
    requests = [(e.messages, e.tools) for e in bfcl_sample(shared_data, 200)]
    assert len(requests) >= 100
    for messages, tools in requests:
        assert cut_request(messages, tools)[0] == messages  # nothing that long: the very same request
        ids, meta = capped.encode(messages, tools)
        ids_whole, meta_whole = whole.encode(messages, tools)
        assert ids == ids_whole and np.array_equal(meta, meta_whole)


def long_text(seed_texts: list[str], chars: int, head: str, tail: str) -> str:
    body = " ".join(seed_texts)
    middle = (body + " ") * (chars // (len(body) + 1) + 1)
    return head + " " + middle[:chars] + " " + tail


def test_a_long_request_packs_the_same_tokens_as_the_whole_text(encoders, bfcl_requests):  # noqa: F811
    whole, _ = encoders
    questions = [m.content for ms, _ in bfcl_requests[:30] for m in ms if m.role == "user" and m.content]
    messages, tools = bfcl_requests[0]
    question = long_text(questions, 200_000, "Start: compute the factorial of 7 please,", "and finally the area of a circle.")
    history = long_text(questions[::-1], 60_000, "earlier", "turn")
    long_tool = Tool(name="describe", description=long_text(questions, 40_000, "Describes", "things."),
                     parameters={"type": "object", "properties": {"x": {"type": "string"}}})
    request = [Message(role="user", content=history),
               Message(role="assistant", content=None, tool_calls=[Call(name=tools[0].name, arguments={"blob": history})]),
               Message(role="tool", content="42", name=tools[0].name),
               Message(role="user", content=question)]
    cut_messages, cut_tools = cut_request(request, [*tools, long_tool])
    assert max(len(m.content or "") for m in cut_messages) <= CUT_CHARS + 1 and len(cut_tools[-1].description) <= CUT_CHARS + 1
    packed = pack_request(cut_messages, cut_tools, whole.tokenizer, whole.packing)
    full = pack_request(request, [*tools, long_tool], whole.tokenizer, whole.packing)
    assert packed.ids == full.ids  # the window holds the same tokens: head and tail of the question, the same tools
    assert full.stats.user_truncated and packed.stats.user_kept == full.stats.user_kept
    assert packed.stats.tools_kept == full.stats.tools_kept and packed.stats.turns_kept == full.stats.turns_kept


class CountingTokenizer:
    """The real tokenizer, counting the characters it is given."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.chars = tokenizer, 0

    def __call__(self, text, **kw):
        self.chars += len(text)
        return self.tokenizer(text, **kw)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_the_router_client_tokenizes_a_2mb_request_like_a_small_one(tiny_router_dir):  # noqa: F811
    """A 1.95 MB message is tokenized once, as a small one is (tokenizing it ~4 times took 4.4-4.8 s on /v1/route)."""
    import json

    from serving.client import RouterClient

    whole = RequestEncoder.from_dir(tiny_router_dir)
    counting = CountingTokenizer(whole.tokenizer)
    info = json.loads((tiny_router_dir / "router.json").read_text())
    client = RouterClient(RequestEncoder(counting, info), backend=None, info=info, version="test")
    big = [Message(role="user", content="weather in Paris and Rome? " * 75_000)]  # ~2 MB
    client.encoder.encode(big, [])
    assert len(big[0].content) > 2_000_000 and counting.chars < 4 * (CUT_CHARS + 1) + 10_000
    counting.chars = 0
    client.encoder.encode([Message(role="user", content="weather in Paris and Rome? " * 75)], [])  # ~2 KB
    assert counting.chars < 3 * 2_100


def test_cut_text_keeps_both_ends():
    text = "a" * 10 + "b" * 50_000 + "c" * 10
    cut = cut_text(text, 4096)
    assert len(cut) == 4097 and cut.startswith("a" * 10) and cut.endswith("c" * 10)
    assert cut_text("short", 4096) == "short"
    with pytest.raises(ValueError, match="too short"):
        CappedEncoder(object(), cut_chars=100)
