"""The AST verifier: is a model's tool-call output exactly right in meaning?

    from data.verify import prepare, verify, Verdict, REASONS
    p = prepare(example.expected, example.tools, language=language_of(example))
    verify(p, output.calls, output.decode_error)   # Verdict(correct, reason, detail)

The rules and their reasons are documented in docs/verifier.md; run the
verifier over a JSON Lines file of cases with `switchcraft verify CASES.jsonl`.
"""

from data.verify.reasons import CORRECT, OK, REASONS, Verdict
from data.verify.verifier import Prepared, prepare, resolve_name, verify, verify_turns


def language_of(example) -> str:
    """The language an example's values are written in: BFCL's java/javascript
    categories (or meta["language"]) string-encode values; everything else is Python/JSON."""
    lang = (getattr(example, "meta", None) or {}).get("language")
    if isinstance(lang, str):
        return lang.lower()
    cat = getattr(example, "category", "") or ""
    return cat if cat in ("java", "javascript") else "python"


__all__ = [
    "CORRECT",
    "OK",
    "REASONS",
    "Prepared",
    "Verdict",
    "language_of",
    "prepare",
    "resolve_name",
    "verify",
    "verify_turns",
]
