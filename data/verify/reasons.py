"""The verifier's verdict and its fixed, namespaced vocabulary of reasons.

Every verdict is one `Verdict(correct, reason, detail)`; `reason` is "ok" when
correct and otherwise one of `REASONS` (the names BFCL's checker uses where
the meaning is the same, so reports from both read alike).

    from data.verify.reasons import REASONS
    print("\n".join(f"{k}: {v}" for k, v in REASONS.items()))
"""

from __future__ import annotations

from dataclasses import dataclass

OK = "ok"

#: reason -> what it means. Adding a reason is an API change: labels store these strings.
REASONS: dict[str, str] = {
    OK: "the output is exactly right",
    "decode_error": "a call was expected but the output could not be decoded into calls",
    "no_answer": "the model returned no answer at all (an inference error or time-out recorded instead; in a multi-step "
    "episode, a failed request cut it short): a failed call, not a wrong one, and wrong whatever was expected",
    "call_expected": "a call was expected but the output made no call",
    "no_call_expected": "no call was expected (relevance) but the output made one",
    "wrong_count": "the number of calls differs from the expected number",
    "wrong_function": "a call names a function that is not (or not the) expected one",
    "missing_required": "an argument required by the schema and the answer is missing",
    "missing_expected": "an argument the answer needs (not schema-required, no matching default) is missing",
    "unexpected_param": "an argument not in the schema, or not in the answer and not its default",
    "type_error:integer": "an integer parameter got a value that is not an integer",
    "type_error:number": "a number parameter got a value that is not a number",
    "type_error:boolean": "a boolean parameter got a value that is not a boolean",
    "type_error:string": "a string parameter got a value that is not a string",
    "type_error:array": "an array parameter got a value that is not an array",
    "type_error:object": "an object parameter got a value that is not an object",
    "type_error:encoded": "a Java/JavaScript string-encoded value could not be read as its schema type",
    "value_error:number": "a number differs from every acceptable value",
    "value_error:boolean": "a boolean differs from every acceptable value",
    "value_error:string": "a string differs from every acceptable value (after canonicalisation)",
    "value_error:array": "an array differs from every acceptable value (compared as a multiset)",
    "value_error:object": "an object differs from every acceptable value",
    "value_error:other": "a value of another kind (null, mixed types) differs from every acceptable value",
    "episode_failed": "the benchmark's own harness judged the whole multi-step episode wrong (NexusBench labels; "
    "our verifier does not see episodes)",
    "invalid_case": "the verify input itself is malformed (not a model error)",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One verifier decision. `detail` names the offending call and argument."""

    correct: bool
    reason: str
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"correct": self.correct, "reason": self.reason, "detail": self.detail}


CORRECT = Verdict(True, OK, "")


def fail(reason: str, detail: str) -> Verdict:
    # A typo in a reason name would silently create a new label class; refuse it here.
    if reason not in REASONS or reason == OK:
        raise ValueError(f"unknown verifier reason {reason!r}; known: {', '.join(REASONS)}")
    return Verdict(False, reason, detail)
