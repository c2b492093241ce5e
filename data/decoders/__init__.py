"""Decode what a model returned (text, a list, a dict) into `Call`s.

    from data.decoders import decode
    res = decode(raw, tools)          # res.calls | res.error, res.decoder
    .venv/bin/python -m pytest -q tests/data/decoders/test_decoders.py

Decoders live in a registry keyed by name and are tried in registry order, cheapest
and most specific first; each has a cheap `sniff` (could `raw` be in my format?) so
that the expensive parsers run only on plausible input. The first decoder that
reads calls wins; when none does, the error combines the reasons of those that tried.

Error vocabulary (the error text starts with one of these, then a colon):

- `no_call:`   nothing call-shaped: free text, an empty output, an empty list of calls
               (a legitimate answer to a relevance question).
- `malformed:` something call-shaped that could not be read (broken quoting,
               truncated JSON, ...).

e.g. `malformed: python: not Python syntax: unterminated string literal`, or
`no_call: free text` when every decoder that looked saw prose. Decoders in try
order (`list_decoders()`): native_fc, openai_tool_calls, xlam, hermes, chatml,
granite, glaive, json_calls, glm, java, javascript, python.

Reasoning: a `<think>…</think>` block the text starts with is dropped and the answer after it decoded;
a text that opens one and never closes it is `no_call: unfinished reasoning` (its code is thinking, not
calls; see `data.decoders.base.strip_reasoning`).

Prose around calls: a piece picked out of prose (a fenced block, a `[f(...)]` list,
a call line) counts only when its calls name tools in scope, so example code in a
worded answer is not taken for a call (see `data.decoders.python`).

`language` ("java" / "javascript") enables BFCL's Java and JavaScript decoders,
which read values in that language (`true`, `10L`, `"str"`); they run only for
that language, before the Python decoder. Names are mapped back to the tools in
scope (`math_factorial` → `math.factorial`) when `tools` is given and the mapping
is unambiguous (see `data.decoders.names`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from data.decoders import clike, python, structured, tagged
from data.decoders.base import (
    ERROR_KINDS,
    FREE_TEXT,
    MALFORMED,
    NATIVE_TEXT,
    NO_ANSWER,
    NO_CALL,
    UNFINISHED_REASONING,
    Context,
    DecodeFailure,
    DecodeResult,
    is_no_answer,
    no_answer_error,
    strip_reasoning,
)
from data.decoders.names import map_names
from data.registry import Registry
from data.schema import Call, Tool


@dataclass(frozen=True)
class Decoder:
    name: str
    sniff: Callable[[Any, Context], bool]
    parse: Callable[[Any, Context], list[Call]]
    languages: frozenset[str] | None = None  # None: any language; else only these
    description: str = ""


DECODERS: Registry[Decoder] = Registry("decoder")

for _d in (
    Decoder("native_fc", structured.sniff_native_fc, structured.parse_native_fc,
            description="[{name: '<json args>'}] from native function-calling APIs"),
    Decoder("openai_tool_calls", structured.sniff_openai, structured.parse_openai,
            description='{"tool_calls": [{"type": "function", "function": {name, arguments}}]}'),
    Decoder("xlam", structured.sniff_xlam, structured.parse_xlam,
            description='xLAM: {"tool_calls": [{name, arguments}]}'),
    Decoder("hermes", tagged.sniff_hermes, tagged.parse_hermes, description="<tool_call>{...}</tool_call>"),
    Decoder("chatml", tagged.sniff_chatml, tagged.parse_chatml, description="<|im_start|>\\n{...} (Hermes-2-Theta)"),
    Decoder("granite", tagged.sniff_granite, tagged.parse_granite, description="<function_call> {...} (granite)"),
    Decoder("glaive", tagged.sniff_glaive, tagged.parse_glaive, description="<functioncall> {name, arguments: '{...}'}"),
    Decoder("json_calls", structured.sniff_json_calls, structured.parse_json_calls,
            description="JSON or Python-literal [{name, arguments|parameters}] in text"),
    Decoder("glm", tagged.sniff_glm, tagged.parse_glm, description="name\\n{json args} (glm-4)"),
    Decoder("java", clike.sniff_clike, clike.parse_java, frozenset({"java"}), description="BFCL Java: f(a=10L)"),
    Decoder("javascript", clike.sniff_clike, clike.parse_javascript, frozenset({"javascript"}),
            description="BFCL JavaScript: f(a=[1, 2])"),
    Decoder("python", python.sniff_python, python.parse_python, description="Python call syntax via ast"),
):
    DECODERS.add(_d.name, _d)


def list_decoders() -> list[str]:
    """Decoder names in the order `decode` tries them."""
    return DECODERS.names()


_ORDERS: dict[tuple[str | None, int], list[Decoder]] = {}


def _order(language: str | None) -> list[Decoder]:
    key = (language, len(DECODERS))  # a decoder registered later invalidates the cache
    if key not in _ORDERS:
        _ORDERS[key] = [
            d for d in (DECODERS.get(n) for n in DECODERS) if d.languages is None or language in d.languages
        ]
    return _ORDERS[key]


def _normalise(raw: Any) -> Any:
    """Empty → None; a list of only strings (Gemini's text parts) → their text."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return raw if raw.strip() else None
    if isinstance(raw, (list, dict)):
        if not raw:
            return None
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            text = "\n".join(raw)
            return text if text.strip() else None
        return raw
    raise TypeError(type(raw).__name__)


# Memo of text decodes: many models give the same answer to the same question.
# Keyed by the text, the language and what decoding reads of the tools (their names and parameter order),
# never by the tools themselves: a memo that held a request's tools kept its schemas alive. Only short outputs
# over short tool lists are memoised (the recorded outputs that importers decode again and again), so the
# memo's size is bounded whatever callers send. The calls are stored as private copies and copied again on each
# hit: no two results share a mutable argument.
_MEMO: dict[tuple, tuple[list[tuple[str, dict]] | None, str | None, str | None]] = {}
_MEMO_MAX = 20_000
_MEMO_RAW_CHARS = 2_048
_MEMO_TOOLS = 64


def _tools_key(tools: list[Tool] | None) -> tuple | None:
    if tools is None:  # unknown tools decode otherwise than no tools offered ([])
        return ("<tools not given>",)
    if not tools:
        return ()
    if len(tools) > _MEMO_TOOLS:
        return None
    return tuple((t.name, tuple(t.parameters.get("properties") or ())) for t in tools)


def decode(raw: Any, tools: list[Tool] | None = None, *, language: str | None = None) -> DecodeResult:
    """Decode `raw` with the first decoder that reads it; see the module docstring."""
    if not isinstance(raw, str) or len(raw) > _MEMO_RAW_CHARS:
        return _decode(raw, tools, language)
    tools_key = _tools_key(tools)
    if tools_key is None:
        return _decode(raw, tools, language)
    key = (raw, language, tools_key)
    hit = _MEMO.get(key)
    if hit is not None:
        stored, error, decoder = hit
        calls = None if stored is None else [Call(name=n, arguments=_copy_json(a)) for n, a in stored]
        return DecodeResult(calls, error, decoder)
    res = _decode(raw, tools, language)
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    stored = None if res.calls is None else [(c.name, _copy_json(c.arguments)) for c in res.calls]
    _MEMO[key] = (stored, res.error, res.decoder)
    return res


def _copy_json(v: Any) -> Any:
    if type(v) is dict:
        return {k: _copy_json(x) for k, x in v.items()}
    if type(v) is list:
        return [_copy_json(x) for x in v]
    return v


def _prepare(raw: Any, tools: list[Tool] | None, language: str | None) -> tuple[Any, Context] | DecodeResult:
    """The normalised value and its context, or the result for an output with nothing to decode."""
    try:
        value = _normalise(raw)
    except TypeError as e:
        return DecodeResult(None, f"{MALFORMED}: unsupported output type {e}")
    if isinstance(value, str):
        answer = strip_reasoning(value)
        if answer is None:
            return DecodeResult(None, f"{NO_CALL}: {UNFINISHED_REASONING}")
        value = answer if answer.strip() else None
    if value is None:
        return DecodeResult(None, f"{NO_CALL}: empty output")
    return value, Context(tools=tools, language=language)


def _decode(raw: Any, tools: list[Tool] | None, language: str | None) -> DecodeResult:
    prepared = _prepare(raw, tools, language)
    if isinstance(prepared, DecodeResult):
        return prepared
    value, ctx = prepared
    failures: list[tuple[str, DecodeFailure]] = []
    for dec in _order(language):
        if not dec.sniff(value, ctx):
            continue
        try:
            calls = dec.parse(value, ctx)
        except DecodeFailure as f:
            failures.append((dec.name, f))
            continue
        except RecursionError:  # pathological nesting in model text: say so, never crash
            failures.append((dec.name, DecodeFailure(MALFORMED, "nested too deeply")))
            continue
        return DecodeResult(map_names(calls, tools), None, dec.name)
    if not failures or all(f.reason == FREE_TEXT for _, f in failures):
        return DecodeResult(None, f"{NO_CALL}: {FREE_TEXT}")
    kind = MALFORMED if any(f.kind == MALFORMED for _, f in failures) else NO_CALL
    return DecodeResult(None, f"{kind}: " + "; ".join(f"{n}: {f.reason}" for n, f in failures))


def decode_with(name: str, raw: Any, tools: list[Tool] | None = None, *, language: str | None = None) -> DecodeResult:
    """Decode with one named decoder only (its sniff is skipped: the caller knows the format)."""
    dec = DECODERS.get(name)
    prepared = _prepare(raw, tools, language)
    if isinstance(prepared, DecodeResult):
        return prepared
    value, ctx = prepared
    try:
        calls = dec.parse(value, ctx)
    except DecodeFailure as f:
        return DecodeResult(None, f"{f.kind}: {name}: {f.reason}")
    except (TypeError, AttributeError) as e:  # a format that does not fit this value's type
        return DecodeResult(None, f"{MALFORMED}: {name}: cannot read a {type(value).__name__} ({e})")
    return DecodeResult(map_names(calls, tools), None, name)


__all__ = [
    "DECODERS",
    "ERROR_KINDS",
    "NATIVE_TEXT",
    "NO_ANSWER",
    "Decoder",
    "DecodeResult",
    "decode",
    "decode_with",
    "is_no_answer",
    "list_decoders",
    "no_answer_error",
]
