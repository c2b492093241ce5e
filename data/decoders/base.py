"""What every decoder shares: the result type, the failure type, the per-call context,
and the helpers that turn `{name, arguments}`-shaped values into `Call`s.

Error vocabulary (the first word of `DecodeResult.error`, before the colon):

- `no_call`   nothing call-shaped was found: free text, an empty output, an empty
              list of calls. On relevance questions this is the right answer.
- `malformed` something call-shaped was found but could not be read (broken
              quoting, truncated JSON, a call target that is not a name, ...).

An output's `decode_error` may also start with `no_answer` (never a decoder's verdict: an importer's):
the model returned no answer at all (the runner's inference error, a time-out). It is not a call, not a
refusal and not a wrong call: labels say `no_answer`, and the agreement check never counts it as a vote.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from data.schema import Call, Tool

NO_CALL = "no_call"
MALFORMED = "malformed"
ERROR_KINDS = (NO_CALL, MALFORMED)
NO_ANSWER = "no_answer"  # set by importers for an inference error; see the module docstring
FREE_TEXT = "free text"  # the reason when a text decoder finds prose, not calls
# The `decode_error` of a native function-calling model that answered in text: no call, nothing to decode.
NATIVE_TEXT = f"{NO_CALL}: text answer from a native function-calling model"


def no_answer_error(message: str) -> str:
    """The `decode_error` of an output that is no answer (the runner's error `message`, shortened)."""
    return f"{NO_ANSWER}: {snippet(message, 160)}"


def is_no_answer(decode_error: str | None) -> bool:
    """Whether an output's `decode_error` says the model gave no answer at all (an inference error)."""
    return decode_error is not None and decode_error.startswith(NO_ANSWER + ":")


class DecodeFailure(Exception):
    """A decoder could not read `raw`; `kind` is one of ERROR_KINDS."""

    def __init__(self, kind: str, reason: str) -> None:
        assert kind in ERROR_KINDS, kind
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """Decoded calls, or why there are none (exactly one of the two is set)."""

    calls: list[Call] | None
    error: str | None = None
    decoder: str | None = None

    @property
    def ok(self) -> bool:
        return self.calls is not None

    @property
    def error_kind(self) -> str | None:
        """`no_call` or `malformed` (None when decoded)."""
        return self.error.split(":", 1)[0] if self.error else None


@dataclass
class Context:
    """What one decode() call knows besides `raw`; caches work shared by decoders."""

    tools: list[Tool] | None = None
    language: str | None = None  # "python" | "java" | "javascript" | None
    _param_order: dict[str, list[str]] | None = field(default=None, repr=False)
    _text: str | None = field(default=None, repr=False)

    def stripped(self, raw: str) -> str:
        """`raw` without surrounding blanks, special tokens or one enclosing code fence (cached)."""
        if self._text is None:
            self._text = strip_fence(raw)
        return self._text

    @property
    def param_order(self) -> dict[str, list[str]]:
        """Tool name → its parameter names in schema order (binds positional arguments)."""
        if self._param_order is None:
            self._param_order = _param_order(self.tools) if self.tools else {}
        return self._param_order


def _param_order(tools: list[Tool]) -> dict[str, list[str]]:
    # Computed per decode context, never cached across requests: a cache keyed by the list's identity has to
    # hold the list, and with it every schema a caller sent.
    order: dict[str, list[str]] = {}
    for t in tools:
        names = list((t.parameters.get("properties") or {}).keys())
        order[t.name] = names
        # Models that rewrite dots still mean the same tool.
        order.setdefault(t.name.replace(".", "_"), names)
    return order


# --- lenient value loading -----------------------------------------------------

_JSON_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def loads_lenient(text: str) -> Any:
    """JSON, else a Python literal (single quotes, tuples), where the bare words
    true/false/null count too (models mix the two syntaxes). Raises ValueError."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        with warnings.catch_warnings():  # invalid escapes in model text: data, not our code
            warnings.simplefilter("ignore")
            node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError) as e:
        raise ValueError(f"neither JSON nor a Python literal ({getattr(e, 'msg', e)})") from None
    return _literal(node)


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        if isinstance(v, complex) or v is Ellipsis:  # no JSON counterpart: keep the source
            return ast.unparse(node)
        return v
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking (**) is not a literal")
        return {str(_literal(k)): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.Name) and node.id in _JSON_WORDS:
        return _JSON_WORDS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    raise ValueError(f"not a literal: {ast.unparse(node)[:40]!r}")


def raw_decode_lenient(text: str, pos: int = 0) -> tuple[Any, int]:
    """One JSON value starting at `pos` (whatever follows is ignored), falling back to
    the longest balanced `{...}`/`[...]` read as a Python literal. Returns (value, end)."""
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError:
        pass
    end = balanced_end(text, pos)
    if end is None:
        raise ValueError("unbalanced brackets (truncated?)")
    return loads_lenient(text[pos:end]), end


_DECODER = json.JSONDecoder()
_OPEN = {"{": "}", "[": "]", "(": ")"}


def balanced_end(text: str, pos: int) -> int | None:
    """Index just past the bracket group opening at `pos`, skipping quoted strings."""
    if pos >= len(text) or text[pos] not in _OPEN:
        return None
    stack: list[str] = []
    i, n = pos, len(text)
    while i < n:
        c = text[i]
        if c in "\"'`":
            i = _string_end(text, i)
            if i < 0:
                return None
            continue
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return i + 1
        i += 1
    return None


def _string_end(text: str, i: int) -> int:
    """Index just past the string literal starting at `i` (-1 if unterminated)."""
    q = text[i]
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == q:
            return i + 1
        i += 1
    return -1


# --- {name, arguments} values → calls -------------------------------------------

ARG_KEYS = ("arguments", "parameters", "args", "params", "kwargs", "input")


def parse_arguments(value: Any, name: str) -> dict[str, Any]:
    """Arguments as recorded: a dict, a JSON string of one (possibly single-quoted
    pseudo-JSON), or empty."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = loads_lenient(value)
        except ValueError as e:
            raise DecodeFailure(MALFORMED, f"arguments of {name!r} are not JSON: {e}") from None
    if not isinstance(value, dict):
        raise DecodeFailure(MALFORMED, f"arguments of {name!r} are a {type(value).__name__}, not an object")
    return {str(k): v for k, v in value.items()}


def make_call(name: Any, arguments: Any) -> Call:
    if not isinstance(name, str) or not name.strip():
        raise DecodeFailure(MALFORMED, f"call name is {name!r}, not a non-empty string")
    return Call(name=name.strip(), arguments=parse_arguments(arguments, name))


def named_object_call(obj: Any) -> Call | None:
    """`{"name": f, "arguments": {...}}` (or parameters/args, or the arguments inline) → Call;
    None if not that shape."""
    if not isinstance(obj, dict) or "name" not in obj:
        return None
    if isinstance(obj.get("function"), dict):  # OpenAI tool call item
        return None
    if "description" in obj or _is_schema(obj.get("parameters")):
        # The model echoed a function's documentation back: not a call.
        raise DecodeFailure(NO_CALL, f"a function description ({str(obj['name'])[:40]!r}), not a call")
    for key in ARG_KEYS:
        if key in obj:
            return make_call(obj["name"], obj[key])
    # A flat call object, {"name": f, "a": 1} (some prompt-based models): the other keys are the arguments.
    return make_call(obj["name"], {k: v for k, v in obj.items() if k not in ("name", "id", "type")})


def _is_schema(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in ("dict", "object") and isinstance(value.get("properties"), dict)


def openai_item_call(obj: Any) -> Call | None:
    """`{"type": "function", "function": {"name", "arguments"}}` → Call; None if not that shape."""
    if not isinstance(obj, dict) or not isinstance(obj.get("function"), dict):
        return None
    fn = obj["function"]
    if "name" not in fn:
        raise DecodeFailure(MALFORMED, "tool call without a function name")
    return make_call(fn["name"], fn.get("arguments"))


_NON_NAME_KEYS = {"name", "function", "function_call", "type", "id", "role", "content", "tool_calls", "arguments", "parameters"}


def single_key_call(obj: Any) -> Call | None:
    """`{f: {...}}` or `{f: "<json>"}` (native function calling) → Call; None if not that shape."""
    if not isinstance(obj, dict) or len(obj) != 1:
        return None
    ((name, args),) = obj.items()
    if name in _NON_NAME_KEYS or not isinstance(args, (dict, str)) and args is not None:
        return None
    return make_call(name, args)


# --- text helpers -----------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)(?:```|$)", re.S)
SPECIAL_TOKEN = re.compile(r"<\|[a-z_]+\|>")


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
UNFINISHED_REASONING = "unfinished reasoning (<think> never closed)"


def strip_reasoning(text: str) -> str | None:
    """The answer after a reasoning model's `<think>…</think>` block; None when the text opens one and never
    closes it (the model ran out of tokens while thinking: whatever code its reasoning shows is no call).

    Only a block the text starts with counts (a `<think>` later on may be data); a text with a `</think>`
    and no `<think>` had the opening tag in its prompt (Qwen3's thinking templates): its answer follows."""
    if THINK_CLOSE not in text and THINK_OPEN not in text:
        return text
    s = text.lstrip()
    if s.startswith(THINK_OPEN):
        end = s.find(THINK_CLOSE)
        return None if end < 0 else s[end + len(THINK_CLOSE):]
    if THINK_OPEN not in s:
        return s.split(THINK_CLOSE, 1)[1]
    return text


def strip_special_tokens(text: str) -> str:
    """Remove chat-template tokens (`<|python_tag|>`, `<|eot_id|>`) outside string literals.

    Inside a quoted string ('…' or "…", backslash escapes honoured) they are data:
    an argument may well hold "<|x|>". A quote right after a letter or digit
    ("Here's") is prose, not the start of a string.
    """
    if "<|" not in text:
        return text
    out, i, quote, n = [], 0, "", len(text)
    while i < n:
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"" and not (i and text[i - 1].isalnum()):
            quote = ch
            out.append(ch)
        elif ch == "<" and (m := SPECIAL_TOKEN.match(text, i)):
            i = m.end()
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def fenced_blocks(text: str) -> list[str]:
    """Bodies of ``` code fences (an unterminated last fence runs to the end)."""
    if "```" not in text:
        return []
    return [m.group(2).strip() for m in _FENCE.finditer(text) if m.group(2).strip()]


def strip_fence(text: str) -> str:
    """The body of a text that is one code fence, else the text; special tokens removed."""
    s = text.strip()
    if s.startswith("<|"):
        s = strip_special_tokens(s).strip()
    if s.startswith("```"):
        blocks = fenced_blocks(s)
        if blocks:
            return blocks[0]
    return s


def snippet(text: str, n: int = 40) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"
