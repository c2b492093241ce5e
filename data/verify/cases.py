"""`switchcraft verify CASES.jsonl [--out FILE]`: the verifier as a stable command.

Input, one JSON object a line: `{"id", "tools", "expected", "output"}` and
optionally `"language"` ("python", "java", "javascript"; default python).
`tools` is a list of function docs (BFCL or OpenAI style), `expected` BFCL's
`ground_truth` form (`[{fn: {param: [acceptable values]}}]`, `""` among the
values = may be omitted, `[]` = no call expected), `output` a raw model output
in any form the decoders read. Unknown extra fields are ignored.

Output, one JSON line per input line, in order: `{"id", "correct", "reason",
"detail"}`. A malformed case gets `reason: "invalid_case"` (with a detail that
names the line and field) and the rest still run.

    from data.verify.cases import verify_cases
    for verdict in verify_cases(open("cases.jsonl")): print(verdict)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from data.errors import DataError
from data.verify import prepare, verify
from data.verify.reasons import Verdict

LANGUAGES = ("python", "java", "javascript")
REQUIRED = ("id", "tools", "expected", "output")


class InvalidCase(ValueError):
    """A case line that cannot be verified; the message names the line and field."""


def verify_cases(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """One result dict per non-blank input line, in order."""
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        case_id: Any = None
        try:
            case = _parse(line, line_no)
            case_id = case.get("id")
            verdict = verify_case(case, line_no)
        except InvalidCase as e:
            verdict = Verdict(False, "invalid_case", str(e))
        except Exception as e:  # noqa: BLE001 - a bug must not stop the other cases; report it on this one
            verdict = Verdict(
                False, "invalid_case", f"line {line_no}: could not verify ({type(e).__name__}: {e})"
            )
        yield {"id": case_id, **verdict.to_dict()}


def _parse(line: str, line_no: int) -> dict[str, Any]:
    try:
        case = json.loads(line)
    except json.JSONDecodeError as e:
        raise InvalidCase(f"line {line_no}: invalid JSON at column {e.colno}: {e.msg}") from None
    if not isinstance(case, dict):
        raise InvalidCase(f"line {line_no}: a case must be a JSON object, got {type(case).__name__}")
    return case


def verify_case(case: dict[str, Any], line_no: int = 0) -> Verdict:
    """Verify one parsed case; raises InvalidCase naming the offending field."""
    from data.decoders import decode
    from data.sources.bfcl_common import expected_from_ground_truth
    from data.tools import tools_from_docs

    missing = [k for k in REQUIRED if k not in case]
    if missing:
        raise InvalidCase(
            f"line {line_no}: missing field(s) {', '.join(missing)} (each case needs {', '.join(REQUIRED)})"
        )
    language = case.get("language") or "python"
    if language not in LANGUAGES:
        raise InvalidCase(
            f"line {line_no}: field 'language': {language!r} is not one of {', '.join(LANGUAGES)}"
        )
    docs = case["tools"]
    if not isinstance(docs, (list, dict)):
        raise InvalidCase(
            f"line {line_no}: field 'tools': expected a list of function docs, got {type(docs).__name__}"
        )
    try:
        tools = tools_from_docs(docs)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InvalidCase(f"line {line_no}: field 'tools': bad function doc ({e})") from None
    try:
        expected = expected_from_ground_truth(case["expected"], tools=tools, line=line_no)
    except (DataError, ValueError) as e:
        raise InvalidCase(f"line {line_no}: field 'expected': {getattr(e, 'message', e)}") from None
    res = decode(case["output"], tools, language=None if language == "python" else language)
    return verify(prepare(expected, tools, language=language), res.calls, res.error)
