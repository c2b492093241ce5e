"""BFCL v3's revisions of the v1 questions: which non-live answers, questions and tool lists changed.

    from data.verify.bfcl_v3_revisions import find_revisions
    rev = find_revisions(v3_examples, v1_examples)   # both {id: Example}, from read_source
    rev.answers                                      # v3 id -> the v1 Example whose answer differs

The non-live v3 ids (`simple_0`, `multiple_3`, `irrelevance_7`, …) are BFCL v1's questions (`simple_0`,
`multiple_function_3`, `relevance_7`, …) with v3's revised files. The v3 run was scored against v3's answers
and so are our v3 labels; the v1 answer of a revised query is kept here only to measure what the revision
changes (`bfcl_v3_agreement.compare_v3` verifies each output of a revised query against both and counts the
labels that differ, and the agreement with BFCL under each answer).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from data.schema import Example

# v3 category -> the v1 category of the same questions
V1_CATEGORY = {"simple": "simple", "multiple": "multiple_function", "parallel": "parallel_function",
               "parallel_multiple": "parallel_multiple_function", "java": "java", "javascript": "javascript",
               "irrelevance": "relevance"}


@dataclass
class Revisions:
    """Per v3 category: queries with a v1 counterpart, and how many changed answer, question text or tools."""

    matched: Counter = field(default_factory=Counter)
    answer: Counter = field(default_factory=Counter)
    question: Counter = field(default_factory=Counter)
    tools: Counter = field(default_factory=Counter)
    answers: dict[str, Example] = field(default_factory=dict)  # v3 id -> v1 example, where the answer differs
    # Over the compared pairs of revised-answer queries: our labels under v3's answer vs v1's.
    pairs: int = 0
    flipped: int = 0  # our label differs between the two answers
    agree_v3: int = 0  # agrees with BFCL's verdict, labelled against v3's answer (what we report)
    agree_v1: int = 0  # the same, had we kept v1's answer


def v1_id(v3_id: str, category: str) -> str | None:
    """The BFCL v1 id of a non-live v3 query (`bfcl_v3:multiple_3` -> `bfcl_v1:multiple_function_3`)."""
    if category not in V1_CATEGORY:
        return None
    return f"bfcl_v1:{V1_CATEGORY[category]}_{v3_id.rsplit('_', 1)[1]}"


def find_revisions(v3: dict[str, Example], v1: dict[str, Example]) -> Revisions:
    """Compare each non-live v3 query with its v1 original (answers as parsed by our readers)."""
    rev = Revisions()
    for qid, e in v3.items():
        old = v1.get(v1_id(qid, e.category) or "")
        if old is None:
            continue
        rev.matched[e.category] += 1
        rev.question[e.category] += [m.content for m in e.messages] != [m.content for m in old.messages]
        rev.tools[e.category] += [_tool(t) for t in e.tools] != [_tool(t) for t in old.tools]
        if e.expected.model_dump() != old.expected.model_dump():
            rev.answer[e.category] += 1
            rev.answers[qid] = old
    return rev


def _tool(t) -> tuple:
    return t.name, t.description, t.parameters
