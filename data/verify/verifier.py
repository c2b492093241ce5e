"""The verifier: an output's calls against the expected answer(s) -> Verdict.

Prepare each example once (`prepare`), then verify any number of outputs
against it (`verify`): the per-example work (schema lookups, documented
defaults, name aliases) is done once, and the hot loop touches only dicts,
lists and cached string keys — no pydantic validation.

    from data.verify import prepare, verify
    p = prepare(example.expected, example.tools, language="python")
    verdict = verify(p, output.calls, output.decode_error)

Rules, in order: decode errors and "no call" cases first; then the number of
calls; then a bipartite match of output calls to expected calls, where a pair
matches when the (alias-resolved) names agree and every argument passes
`_argument_problem`. Several alternatives: any one matching is correct.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from data.decoders.base import is_no_answer
from data.pycall import POSITIONAL_PREFIX
from data.schema import Expected, Tool
from data.verify.defaults import NO_DEFAULT, documented_default
from data.verify.matching import has_perfect_matching, max_matching
from data.verify.reasons import CORRECT, Verdict, fail
from data.verify.values import mark_positional, mismatch

ENCODED_LANGUAGES = {"java", "javascript"}
# Calls that are a model's trained way of declining, not tool calls: NexusRaven
# answers a request no tool fits with `out_of_domain(user_query=...)`.
NO_CALL_SENTINELS = frozenset({"out_of_domain"})
_SUFFIX = re.compile(r"[ _]\d+$")
# A parameter the answer does not mention: (acceptable values, may be omitted).
ArgSpec = tuple[list[Any], bool]


@dataclass(slots=True)
class PreparedTool:
    name: str
    props: dict[str, dict] | None  # None: schema unknown (tool not in scope)
    required: frozenset[str]
    defaults: dict[str, Any]


@dataclass(slots=True)
class PreparedCall:
    name: str
    args: dict[str, ArgSpec]


@dataclass(slots=True)
class Prepared:
    """An example's expected answer and tools, ready for fast verification."""

    no_call: bool
    alternatives: list[list[PreparedCall]]
    tools: dict[str, PreparedTool]
    aliases: dict[str, str]
    encoded: bool
    expected_names: frozenset[str] = field(default_factory=frozenset)
    any_call: bool = False  # BFCL live_relevance: any call to an offered tool is right


def prepare(expected: Expected, tools: Sequence[Tool], *, language: str | None = None) -> Prepared:
    """Precompute what verifying outputs of one example needs. `language`:
    "java"/"javascript" read string-encoded values (see `values`); else Python/JSON."""
    ptools: dict[str, PreparedTool] = {}
    aliases: dict[str, str] = {}
    for t in tools:
        props = t.parameters.get("properties")
        props = {k: mark_positional(v) for k, v in props.items()} if isinstance(props, dict) else {}
        defaults = {}
        for p, s in props.items():
            d = documented_default(s)
            if d is not NO_DEFAULT:
                defaults[p] = d
        req = t.parameters.get("required") or []
        ptools[t.name] = PreparedTool(
            t.name, props, frozenset(r for r in req if isinstance(r, str)), defaults
        )
        _add_aliases(aliases, t.name)
    alternatives = []
    for alt in expected.alternatives:
        calls = []
        for c in alt:
            name = answer_name(c.name, ptools)
            _add_aliases(aliases, name)
            calls.append(PreparedCall(name, {k: (list(a.values), a.optional) for k, a in c.args.items()}))
        alternatives.append(calls)
    names = frozenset(c.name for alt in alternatives for c in alt)
    return Prepared(expected.no_call, alternatives, ptools, aliases, language in ENCODED_LANGUAGES, names, expected.any_call)


def answer_name(name: str, tools: dict[str, PreparedTool]) -> str:
    """The tool an answer's call names. BFCL keys repeated calls `f_1`, `f 2`
    (dict keys must differ) and sometimes names a tool by a shortened or
    suffixed form (`find_closest` for `restaurant_search.find_closest`,
    `queue` for `queue_1`); map to the one tool in scope that fits."""
    if name in tools or not tools:
        return name
    base = _SUFFIX.sub("", name)
    if base in tools:
        return base
    fits = [t for t in tools if _SUFFIX.sub("", t) == base or t.endswith("." + base)]
    return fits[0] if len(fits) == 1 else name


def _add_aliases(aliases: dict[str, str], name: str) -> None:
    # Native function calling forbids "." in names, so `math.factorial` is
    # offered (and called) as `math_factorial`; map such spellings back.
    aliases.setdefault(name, name)
    aliases.setdefault(name.replace(".", "_"), name)
    aliases.setdefault(name.replace(".", "-"), name)


def resolve_name(p: Prepared, name: str) -> str:
    if name in p.aliases:
        return p.aliases[name]
    # Some native-FC models prefix the OpenAI namespace ("functions.get_weather").
    return p.aliases.get(name.removeprefix("functions."), name)


def verify(p: Prepared, calls: Sequence[Any] | None, decode_error: str | None = None) -> Verdict:
    """Verdict for one output: `calls` (Call objects, or {name, arguments} dicts) or a decode error."""
    if calls is None and is_no_answer(decode_error):
        # An inference error is no answer: wrong even where no call is expected, and not a decoding failure.
        return fail("no_answer", decode_error[:160])
    if calls is None or decode_error is not None and not calls:
        if p.no_call:
            return CORRECT  # text (or anything that is not a call) answers a no-call question
        return fail("decode_error", f"could not decode the output: {_short(decode_error or 'no calls')}")
    pairs = [_name_args(c) for c in calls]
    if p.no_call:
        if not pairs or all(n in NO_CALL_SENTINELS and n not in p.tools for n, _ in pairs):
            return CORRECT
        # Any call is wrong here, in scope or not: a hallucinated tool is still a call.
        return fail("no_call_expected", f"no call was expected; got {', '.join(n for n, _ in pairs)}")
    if not pairs:
        wanted = _names(p.alternatives[0]) if p.alternatives else "a call"
        return fail("call_expected", f"expected {wanted}; the output made no call")
    resolved = [(resolve_name(p, n), a) for n, a in pairs]
    if p.any_call:
        unknown = [n for n, _ in resolved if n not in p.tools]
        if unknown:
            return fail("wrong_function", f"{unknown[0]!r} is not a tool in scope")
        return CORRECT
    first: Verdict | None = None
    for alt in p.alternatives:
        v = _verify_alternative(p, resolved, alt)
        if v.correct:
            return v
        if first is None or (first.reason == "wrong_count" and v.reason != "wrong_count"):
            first = v
    assert first is not None
    return first


def verify_turns(turns: Sequence[Prepared], outputs: Sequence[Sequence[Any] | None]) -> Verdict:
    """Multi-turn: each turn's calls against that turn's answer; the first failing turn decides."""
    if len(turns) != len(outputs):
        return fail("wrong_count", f"expected {len(turns)} turns of calls, got {len(outputs)}")
    for i, (p, calls) in enumerate(zip(turns, outputs)):
        v = verify(p, calls)
        if not v.correct:
            return Verdict(False, v.reason, f"turn {i + 1}: {v.detail}")
    return CORRECT


def _name_args(c: Any) -> tuple[str, dict]:
    if isinstance(c, dict):
        return str(c.get("name")), c.get("arguments") or {}
    return c.name, c.arguments


def _verify_alternative(p: Prepared, calls: list[tuple[str, dict]], alt: list[PreparedCall]) -> Verdict:
    if len(calls) != len(alt):
        return fail(
            "wrong_count",
            f"expected {len(alt)} call(s) ({_names(alt)}), got {len(calls)} ({', '.join(n for n, _ in calls)})",
        )
    problems = [[_call_problem(p, name, args, e) for e in alt] for name, args in calls]
    ok = [[pr is None for pr in row] for row in problems]
    if has_perfect_matching(ok):
        return CORRECT
    # Explain one failure: an expected call left unmatched by a maximum matching,
    # against an unmatched output call of the same name if there is one.
    match = max_matching(ok)
    used = set(match)
    j = next(c for c in range(len(alt)) if c not in used)
    free = [i for i, m in enumerate(match) if m < 0]
    same = [i for i in free if calls[i][0] == alt[j].name]
    if not same:
        if len(alt) == 1:
            name = calls[0][0]
            where = "" if name in p.tools else " (not a tool in scope)"
            return fail("wrong_function", f"call 1: got {name!r}{where}, expected {alt[0].name!r}")
        got = ", ".join(calls[i][0] for i in free)
        return fail("wrong_function", f"no call to {alt[j].name!r} matches; unmatched calls: {got}")
    i = same[0]
    reason, detail = problems[i][j]  # type: ignore[misc]
    return fail(reason, f"call {i + 1} {alt[j].name!r}: {detail}")


def _call_problem(p: Prepared, name: str, args: dict, e: PreparedCall) -> tuple[str, str] | None:
    if name != e.name:
        return ("wrong_function", f"got {name!r}, expected {e.name!r}")
    tool = p.tools.get(e.name)
    props = tool.props if tool else None
    defaults = tool.defaults if tool else {}
    for k, v in args.items():
        schema = props.get(k) if props is not None else None
        if props is not None and schema is None:
            if k.startswith(POSITIONAL_PREFIX) and _is_empty(v):
                continue  # `f({})`, `f(None)`: an empty value given by position, bound to no parameter, gives nothing
            return ("unexpected_param", f"argument {k!r} is not a parameter of {e.name!r}")
        if k not in e.args:
            # The answer leaves it out; the model may still spell out the documented
            # default, or an empty value / null that means "not given".
            if _is_empty(v) or k in defaults and mismatch(v, defaults[k], schema, p.encoded) is None:
                continue
            return ("unexpected_param", f"argument {k!r}={_short(v)} is not in the answer")
    for k, (values, optional) in e.args.items():
        schema = props.get(k) if props else None
        if optional and k in args and _is_empty(args[k]):
            continue  # "", [], {} or null where omission is allowed: the same as leaving it out
        if k not in args:
            if optional:
                continue
            if k in defaults and any(mismatch(defaults[k], x, schema, False) is None for x in values):
                continue  # omitted, and the documented default is an acceptable value
            req = tool is not None and k in tool.required
            return (
                "missing_required" if req else "missing_expected",
                f"argument {k!r} is missing (expected one of {_short(values)})",
            )
        problem = _argument_problem(args[k], values, optional, defaults.get(k, NO_DEFAULT), schema, p.encoded)
        if problem is not None:
            return (problem, f"argument {k!r}: got {_short(args[k])}, expected one of {_short(values)}")
    return None


def _argument_problem(
    v: Any, values: list, optional: bool, default: Any, schema: dict | None, encoded: bool
) -> str | None:
    reason = None
    for x in values:
        r = mismatch(v, x, schema, encoded)
        if r is None:
            return None
        reason = reason or r
    if default is not NO_DEFAULT:
        r = mismatch(v, default, schema, encoded)
        # Omission allowed: spelling out the documented default means the same.
        if optional and r is None:
            return None
        reason = reason or r
    return reason or "value_error:other"


def _is_empty(v: Any) -> bool:
    return v is None or (isinstance(v, (str, list, dict)) and not v)


def _names(calls: list[PreparedCall]) -> str:
    return ", ".join(c.name for c in calls)


def _short(v: Any, limit: int = 120) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 1] + "…"
