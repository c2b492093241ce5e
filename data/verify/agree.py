"""Do two models' answers to one request agree *in meaning*? The agreement check of a cascade.

    from data.verify.agree import calls_agree, disagreement_kind, effective_calls
    calls_agree(example.tools, calls_a, calls_b, language="python")   # True / False
    disagreement_kind(example.tools, calls_a, calls_b)                # how two answers that disagree differ

Two answers agree when each, taken as the other's expected answer, passes the
verifier (`data.verify`): the same rules that label outputs (multiset arrays,
`1 == 1.0`, documented defaults, name aliases, bipartite matching of parallel
calls, Java/JS values by schema type). Both directions must pass: one side
spelling out an optional argument the other leaves out is fine only when the
value is the documented default. Two answers that make no call agree (both
decline); a call and a non-call never do.

`effective_calls` is what a model's output *means* as calls, with the labelling
rule for native function-calling models: their text answers are no call. An
output that is no answer at all (an inference error, `data.decoders.is_no_answer`)
becomes `NoAnswer()`: it makes no call, yet it agrees with nothing, not even
another no-answer or a model that declines, so it is never a vote for "no call".

`disagreement_kind` says *how* two answers that disagree differ, from the
first answer's side: `first_declines` / `second_declines` (one makes no call),
`count` (different numbers of calls), `functions` (as many calls, other
functions), `arguments` (the same functions, other arguments). A cascade may
resolve some kinds without asking another model (`training.policy.kinds.agree`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from data.decoders.base import is_no_answer
from data.schema import Call, Expected, Tool

DISAGREEMENT_KINDS = ("first_declines", "second_declines", "count", "functions", "arguments")
from data.verify.verifier import prepare, resolve_name, verify


class NoAnswer(list):
    """The calls of an output that is no answer (an inference error): none, and agreeing with nothing."""

    def __repr__(self) -> str:
        return "NoAnswer()"


def effective_calls(calls: Sequence[Call] | None, decode_error: str | None, *, native_text: bool = False) -> list[Call]:
    """The calls an answer makes: [] for text, a decode error or a native model's prose; `NoAnswer()` for an
    inference error."""
    if calls is None and is_no_answer(decode_error):
        return NoAnswer()
    if native_text or calls is None:
        return []
    return list(calls)


def _as_call(c: Any) -> Call:
    if isinstance(c, Call):
        return c
    if isinstance(c, dict):
        return Call(name=str(c.get("name")), arguments=c.get("arguments") or {})
    return Call(name=c.name, arguments=dict(c.arguments))


def _one_way(tools: Sequence[Tool], reference: list[Call], answer: list[Call], language: str | None) -> bool:
    p = prepare(Expected.exact(reference), tools, language=language)
    return verify(p, answer).correct


def calls_agree(tools: Sequence[Tool], calls_a: Sequence[Any] | None, calls_b: Sequence[Any] | None,
                *, language: str | None = None) -> bool:
    """True when the two answers mean the same calls (both directions of the verifier), or both make none
    (an inference error, `NoAnswer`, agrees with nothing)."""
    if isinstance(calls_a, NoAnswer) or isinstance(calls_b, NoAnswer):
        return False
    a = [_as_call(c) for c in calls_a or []]
    b = [_as_call(c) for c in calls_b or []]
    if not a or not b:
        return not a and not b
    if len(a) != len(b):
        return False
    # Spellings of one tool (`math_factorial` for `math.factorial`) name it the same on both sides.
    names = prepare(Expected.nothing(), tools, language=language)
    a = [Call(name=resolve_name(names, c.name), arguments=c.arguments) for c in a]
    b = [Call(name=resolve_name(names, c.name), arguments=c.arguments) for c in b]
    try:
        return _one_way(tools, b, a, language) and _one_way(tools, a, b, language)
    except ValueError:
        # An argument with no value the verifier can compare (e.g. an empty list spelled as None): disagree.
        return False


def disagreement_kind(tools: Sequence[Tool], calls_a: Sequence[Any] | None, calls_b: Sequence[Any] | None,
                      *, language: str | None = None) -> str:
    """How two answers that do not agree differ (one of DISAGREEMENT_KINDS), from `calls_a`'s side.

    By structure alone: it does not re-run the verifier, so call it on a pair `calls_agree` rejected
    (on a pair that agrees it still names a kind, `arguments` at most). A `NoAnswer` makes no call: it
    declines, here, even against another `NoAnswer` (`first_declines`)."""
    a = [_as_call(c) for c in calls_a or []]
    b = [_as_call(c) for c in calls_b or []]
    if not a or not b:
        if not a and not b and not isinstance(calls_a, NoAnswer) and not isinstance(calls_b, NoAnswer):
            raise ValueError("two answers that both make no call agree; there is no kind of disagreement")
        return "first_declines" if not a else "second_declines"
    if len(a) != len(b):
        return "count"
    names = prepare(Expected.nothing(), tools, language=language)
    if sorted(resolve_name(names, c.name) for c in a) != sorted(resolve_name(names, c.name) for c in b):
        return "functions"
    return "arguments"
