r"""Canonical forms of strings, so that values equal in meaning compare equal.

Rules (each has unit cases in tests/data/verify/test_values.py):
- case, surrounding and repeated whitespace do not matter;
- trivial punctuation (. , ; : ! ? and quote marks) does not matter, except
  between two digits ("1.5" is not "15"); periods join ("U.S." = "US");
- underscores, and hyphens between letters, separate words like spaces
  ("engine_size" = "engine size"); markdown escapes are dropped (`\_` = `_`),
  and so is markdown bold around the whole value (`**No answer.**` = `No answer.`);
- spaces around `<` and `>` do not matter (`x > 5` = `x>5`, `echo. > f.txt` = `echo.>f.txt`);
- math expressions compare by their syntax tree: `x^2` = `x**2`, `2x` =
  `2*x`, and a `lambda x:` / `f(x) =` / `y =` head is ignored;
- ISO-8601 dates and datetimes compare as instants: `Z` is `+00:00`, the
  separator may be `T` or a space, offsets are applied ("10:00+02:00" is
  "08:00Z"); a date never equals a datetime, a naive time never an aware one;
- US state names and postal codes are the same, also inside longer strings
  ("Chicago, IL" = "Chicago, Illinois").

    from data.verify.canon import canon_string
    assert canon_string("Chicago, Illinois") == canon_string("chicago IL")
"""

from __future__ import annotations

import ast
import operator
import re
from datetime import UTC, date, datetime
from collections.abc import Callable
from functools import lru_cache, wraps
from typing import TypeVar

_T = TypeVar("_T")
_CACHED_CHARS = 256  # longer strings are computed, not cached: a cache of caller-sized strings has no bound


def _cached_when_short(maxsize: int) -> Callable[[Callable[[str], _T]], Callable[[str], _T]]:
    """An LRU cache of at most `maxsize` entries that keeps only strings of up to 256 characters (the values
    that recur across models); a longer one is computed each time, so the cache's memory is bounded."""

    def wrap(fn: Callable[[str], _T]) -> Callable[[str], _T]:
        cached = lru_cache(maxsize=maxsize)(fn)

        @wraps(fn)
        def call(text: str) -> _T:
            return cached(text) if len(text) <= _CACHED_CHARS else fn(text)

        call.cache_info = cached.cache_info  # type: ignore[attr-defined]
        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call

    return wrap

US_STATES: dict[str, str] = {
    "alabama": "al",
    "alaska": "ak",
    "arizona": "az",
    "arkansas": "ar",
    "california": "ca",
    "colorado": "co",
    "connecticut": "ct",
    "delaware": "de",
    "florida": "fl",
    "georgia": "ga",
    "hawaii": "hi",
    "idaho": "id",
    "illinois": "il",
    "indiana": "in",
    "iowa": "ia",
    "kansas": "ks",
    "kentucky": "ky",
    "louisiana": "la",
    "maine": "me",
    "maryland": "md",
    "massachusetts": "ma",
    "michigan": "mi",
    "minnesota": "mn",
    "mississippi": "ms",
    "missouri": "mo",
    "montana": "mt",
    "nebraska": "ne",
    "nevada": "nv",
    "new hampshire": "nh",
    "new jersey": "nj",
    "new mexico": "nm",
    "new york": "ny",
    "north carolina": "nc",
    "north dakota": "nd",
    "ohio": "oh",
    "oklahoma": "ok",
    "oregon": "or",
    "pennsylvania": "pa",
    "rhode island": "ri",
    "south carolina": "sc",
    "south dakota": "sd",
    "tennessee": "tn",
    "texas": "tx",
    "utah": "ut",
    "vermont": "vt",
    "virginia": "va",
    "washington": "wa",
    "west virginia": "wv",
    "wisconsin": "wi",
    "wyoming": "wy",
    "district of columbia": "dc",
}

# Names -> codes only (never codes -> names): "in", "or", "me" are common words,
# and mapping one direction on both sides is enough to make the forms meet.
# Longest names first so "west virginia" wins over "virginia".
_STATE_NAME = re.compile(
    r"\b(" + "|".join(sorted((re.escape(n) for n in US_STATES), key=len, reverse=True)) + r")\b"
)
# Trivial punctuation, unless it sits between two digits (decimal points, thousands).
_PUNCT = re.compile(r"(?<!\d)[,;:!?]|[,;:!?](?!\d)")
# A period outside numbers is deleted, not spaced: "U.S." = "US", "St." = "St".
_PERIOD = re.compile(r"(?<!\d)\.|\.(?!\d)")
_QUOTES = re.compile(r"[\"'`\u2018\u2019\u201c\u201d]")
_SPACE = re.compile(r"\s+")
# Markdown escapes models put in values ("JDBC\_session").
_MD_ESCAPE = re.compile(r"\\([_*`#~\[\]])")
# Markdown bold around the whole value ("**No answer found.**"): emphasis, not content.
_MD_BOLD = re.compile(r"^\*\*(?!\*)((?:(?!\*\*).)+)(?<!\*)\*\*$", re.DOTALL)
# Spaces around < and > (comparisons, shell redirection): "x > 5" = "x>5", "echo. > f.txt" = "echo.>f.txt".
_ANGLE = re.compile(r"\s*([<>])\s*")
# Word separators: "engine_size" = "engine size", "gluten-free" = "gluten free"
# (a hyphen only between letters: "-5" and "2024-01-02" keep theirs).
_WORD_SEP = re.compile(r"_|(?<=[^\W\d_])-(?=[^\W\d_])")
_ISO_START = re.compile(r"^\d{4}-\d{2}-\d{2}")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_instant(text: str) -> date | datetime | None:
    """An ISO-8601 date or datetime, or None. Datetimes with an offset are made UTC."""
    s = text.strip()
    if not _ISO_START.match(s):
        return None
    try:
        if _ISO_DATE.match(s):
            return date.fromisoformat(s)
        if s.endswith(("Z", "z")):
            s = s[:-1] + "+00:00"
        dt = datetime.fromisoformat(s)  # accepts "T" or " " between date and time
    except ValueError:
        return None
    return dt.astimezone(UTC) if dt.tzinfo is not None else dt


@_cached_when_short(maxsize=1 << 16)
def canon_string(text: str) -> str:
    """The canonical key of a string; two strings are equal when their keys are.

    Cached: the same expected values and model answers recur across 71 models.
    """
    instant = parse_instant(text)
    if instant is not None:
        kind = "dt" if isinstance(instant, datetime) else "d"
        aware = "z" if isinstance(instant, datetime) and instant.tzinfo else ""
        return f"\x00{kind}{aware}:{instant.isoformat()}"
    s = _MD_BOLD.sub(r"\1", text.strip()).casefold()
    s = _ANGLE.sub(r"\1", s)
    s = _MD_ESCAPE.sub(r"\1", s)
    s = _QUOTES.sub("", s)
    s = _WORD_SEP.sub(" ", s)
    s = _PERIOD.sub("", s)
    s = _PUNCT.sub(" ", s)
    s = _SPACE.sub(" ", s).strip()
    if s:
        s = _STATE_NAME.sub(lambda m: US_STATES[m.group(1)], s)
    return s


_EXPR_HEAD = re.compile(r"^\s*(lambda\s*[\w\s,]*:|[a-zA-Z]\s*\(\s*[a-z]\s*\)\s*=|y\s*=)\s*")
_LAMBDA_VAR = re.compile(r"^\s*lambda\s+([a-zA-Z_]\w*)\s*:")
_IMPLICIT_MUL = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([a-zA-Z(])")
_OPERATOR = re.compile(r"[*^+/()-]")


@_cached_when_short(maxsize=1 << 14)
def expression_key(text: str) -> str | None:
    """The syntax tree of a math expression, or None if `text` is not one."""
    if not _OPERATOR.search(text):
        return None
    head = _LAMBDA_VAR.match(text)
    s = _EXPR_HEAD.sub("", text).replace("^", "**")
    if head and head.group(1) != "x":
        # `lambda t: 3*t**2` is `lambda x: 3*x**2`: rename the one bound variable.
        s = re.sub(rf"\b{head.group(1)}\b", "x", s)
    s = _IMPLICIT_MUL.sub(r"\1*\2", s).replace(")(", ")*(")
    try:
        tree = ast.parse(s.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not isinstance(tree, (ast.BinOp, ast.UnaryOp, ast.Call)):
        return None  # a bare name or number is a string, not an expression
    return ast.dump(tree, annotate_fields=False)


def expressions_equal(a: str, b: str) -> bool:
    ka = expression_key(a)
    return ka is not None and ka == expression_key(b)


_ARITH_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


@_cached_when_short(maxsize=1 << 12)
def arithmetic_value(text: str) -> float | None:
    """The value of a pure-number arithmetic expression ("500 * 500"), else None."""
    if not _OPERATOR.search(text):
        return None
    try:
        return _arith(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError, RecursionError):
        return None


def _arith(node: ast.expr) -> float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _arith(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")  # keep evaluation cheap and bounded
        return _ARITH_OPS[type(node.op)](left, right)
    raise ValueError("not arithmetic")
