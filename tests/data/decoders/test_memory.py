"""Decoding keeps no caller-sized data between requests: memory stays flat over many distinct tool lists.

The gateway decodes every upstream answer against the request's tools. A cache that held those tools (or long
strings from them) let any key holder grow the process without bound: one 100,000-item `enum` per request.
"""

from __future__ import annotations

import gc
import json
import tracemalloc

from data.decoders import decode
from data.decoders.names import map_names
from data.schema import Call, Tool
from data.verify.canon import canon_string


def _tools(i: int, enum_items: int) -> list[Tool]:
    """A tool list no earlier request sent: its own name and a large enum of its own."""
    big = [f"value-{i}-{k}" for k in range(enum_items)]
    return [Tool(name=f"lookup.v{i}", parameters={"type": "object", "properties": {
        "city": {"type": "string", "enum": big}, "days": {"type": "integer"}}})]


def _serve_one(i: int) -> None:
    tools = _tools(i, 5_000)
    raw = f"[lookup.v{i}(city='value-{i}-3', days=2)]"
    result = decode(raw, tools, language="python")
    assert result.ok and result.calls[0].name == f"lookup.v{i}"
    native = json.dumps([{f"lookup_v{i}": {"city": "x", "days": 1}}])
    assert decode(native, tools).ok
    calls = map_names([Call(name=f"functions.lookup_v{i}", arguments={})], tools)
    assert calls[0].name == f"lookup.v{i}"
    canon_string("x" * 50_000 + str(i))  # a long answer string: computed, never kept


def _traced_after(n: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(n):
            _serve_one(i)
        gc.collect()
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_number_of_distinct_tool_lists():
    # One request's tools are ~250 KB of Python objects; 200 requests held would be ~50 MB.
    few = _traced_after(20)
    many = _traced_after(200)
    assert many - few < 2_000_000, f"{(many - few) / 1e6:.1f} MB more after 200 distinct tool lists than after 20"


def test_long_strings_are_compared_but_not_cached():
    canon_string.cache_clear()
    assert canon_string("Chicago, Illinois") == canon_string("chicago IL")
    long = "Chicago, Illinois " * 100
    assert canon_string(long) == canon_string(long.upper())
    assert canon_string.cache_info().currsize == 2  # the two short strings only
