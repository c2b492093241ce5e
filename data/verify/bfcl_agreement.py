"""Our verifier against BFCL's own checker, over all recorded BFCL v1 outputs.

    switchcraft verify-agreement [--run-dir runs/default]

Reads the 71 models' recordings (configs/data.yaml `outputs.bfcl_v1`) and
BFCL's verdicts (`outputs.checker_verdicts`), decodes and verifies every
output, and reports agreement per category and overall. Every disagreement is
put in one named class (`CLASSES`), each with its cause (BFCL too strict, BFCL
too lenient, our bug) and the rule that decides it; `agreement_report` writes
`agreement.md` (counts and one example per class) and `agreement.csv` (every
disagreement).

Alignment of the verdicts file: its `relevance_<k>` verdicts belong to output
`relevance_<k-1>` (measured, see `RELEVANCE_ID_SHIFT`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.errors import DataError
from data.schema import Example
from data.verify.batch import Checked, decode_and_verify, load_bfcl_v1, read_recorded_rows

# BFCL's score files number relevance entries from 1 where the results number
# from 0, and the verdicts file kept the score files' numbers. Measured: pairing
# verdict `relevance_k` with output k agrees on 62.8% of relevance pairs, with
# output k-1 on 90.0% (shifts of ±2, ±3: 62-63%). No other category is shifted.
# Output relevance_239 has no verdict and is left out (71 pairs).
RELEVANCE_ID_SHIFT = 1

STRICT, LENIENT, BUG = "BFCL too strict", "BFCL too lenient", "our bug"
CAUSES = (STRICT, LENIENT, BUG)

# class -> (cause, the rule that decides it); `classify` assigns them in its own order.
CLASSES: dict[str, tuple[str, str]] = {
    "call_format": (
        STRICT,
        "Well-formed calls in a wrapping BFCL's decoder rejects (markdown fences, prose around the call, JSON call objects, quoted or escaped names), or whose quoted values its decoder re-typed ('2022' -> 2022); BFCL reports a decoder failure, a missing function name or a type error. Our decoders read them, and the calls are right.",
    ),
    "trailing_output": (
        STRICT,
        "BFCL counted markup or text after the calls (`<|im_start|>`, notes) as extra calls (wrong_count); the calls are right.",
    ),
    "answer_key_malformed": (
        STRICT,
        "BFCL's answer writes a parameter as a call of its own (repaired on ingestion, see the example's meta.repairs), so BFCL expects one call too many and fails every right answer (wrong_count).",
    ),
    "positional_args": (
        STRICT,
        'Arguments passed positionally (`f("a", "b")`), bound to parameters in schema order; BFCL reports them missing.',
    ),
    "int_for_float": (
        STRICT,
        "An integer where the schema or answer has a float (`[1, 3]` for `[1.0, 3.0]`): numbers compare by value, 1 == 1.0.",
    ),
    "null_for_omitted": (
        STRICT,
        '`null`, `""` or `[]` for a parameter the answer lets be omitted: an empty value is the same as leaving it out.',
    ),
    "language_encoding": (
        STRICT,
        "Java/JavaScript values given as strings the schema type reads ('true', '42', \"['-v']\", '{limit=50}') or as native JSON values; BFCL accepts only its own Java/JS spellings.",
    ),
    "array_as_multiset": (
        STRICT,
        "Arrays compared as multisets: the same elements in another order (`['cheese', 'pasta']` for `['pasta', 'cheese']`).",
    ),
    "string_canonical": (
        STRICT,
        "Strings equal after canonicalisation: case, whitespace, punctuation and quotes, ISO instants, US state names/codes, math expressions (`y=x^2` = `x**2`).",
    ),
    "documented_default": (
        STRICT,
        "An omitted parameter whose documented default (schema `default` or 'Default is X') is an acceptable value.",
    ),
    "explicit_default": (
        STRICT,
        "A parameter the answer leaves out, given with its documented default or an empty value.",
    ),
    "execution": (
        STRICT,
        "Executable categories: BFCL ran the call and the result differed (live data such as stock prices and case counts, a function-valued string that is not a Python callable) though the arguments equal the answer's.",
    ),
    "parallel_value": (
        STRICT,
        "Parallel categories: BFCL found no match for a call whose arguments equal the answer's under one of the value rules above (its message does not name the argument).",
    ),
    "relevance_text_counted_as_call": (
        STRICT,
        "Relevance: the output is text with no call, which BFCL's decoder nonetheless 'decoded'; a text answer is right when no call is expected.",
    ),
    "relevance_call_made": (
        LENIENT,
        "Relevance: the output makes a tool call (explicit call syntax or a tool in scope) that BFCL's decoder could not read, and BFCL passes whatever it cannot decode. Any call is wrong when none is expected.",
    ),
    "execution_equivalent": (
        LENIENT,
        "Executable categories: BFCL compares execution results, so arguments that differ from the answer (swapped operands of gcd/lcm, other flags, other strings) pass when they happen to give the same result. We compare the arguments.",
    ),
    "bfcl_string_standardisation": (
        LENIENT,
        "BFCL deletes spaces and , . / - _ * ^ before comparing strings (so '2x+1' = '2*x+1' but also 'x/2' = 'x2'); strings that differ in meaning pass.",
    ),
    "bfcl_invalid_literal_accepted": (
        LENIENT,
        "BFCL accepts a Java/JavaScript string that is not one literal of the parameter's type (e.g. '[10, 15], [20, 25]' for one array).",
    ),
    "decoder_code_in_prose": (
        BUG,
        "Relevance: our decoder read a code sample inside a prose answer (`print(...)`, `factors.append(...)`) as a call; the model made no tool call. Decoder fix needed.",
    ),
    "decode_difference": (BUG, "BFCL decoded the output and we did not."),
    "unexplained": (BUG, "No rule above explains the disagreement."),
}

_DECODER_ERRORS = ("ast_decoder:", "executable_decoder:")
_STRUCTURED_DECODERS = {
    "native_fc",
    "openai_tool_calls",
    "xlam",
    "hermes",
    "chatml",
    "granite",
    "glaive",
    "json_calls",
    "glm",
}
_BFCL_STD = re.compile(r"[ ,./\-_*^]")
_FAILED_ARG = re.compile(r"^call (\d+) '([^']+)': argument '([^']+)'")
_DEDUP = re.compile(r"[ _]\d+$")  # BFCL's `fn_1` / `fn 2` keys for repeated calls
_MISSING = re.compile(r"parameter: '([^']+)'")


def bfcl_standardise(s: str) -> str:
    """BFCL v1's string key (its documented checker behaviour): lower case, with
    spaces and , . / - _ * ^ deleted and ' read as "."""
    return _BFCL_STD.sub("", s).lower().replace("'", '"')


def classify(example: Example, bfcl: dict, c: Checked) -> str:
    """The disagreement class of one (output, BFCL verdict) pair that disagree."""
    cat = example.category
    et = bfcl.get("error_type") or ""
    msg = bfcl.get("error") or ""
    if not bfcl["valid"]:  # BFCL: wrong; we: correct
        if cat == "relevance":
            return "relevance_text_counted_as_call"
        if et.startswith(_DECODER_ERRORS) or et.endswith("wrong_func_name"):
            return "call_format"
        if et.endswith("wrong_count"):
            return "answer_key_malformed" if example.meta.get("repairs") else "trailing_output"
        if et.endswith(("missing_optional", "missing_required")):
            m = _MISSING.search(msg)
            present = m and any(m.group(1) in call.arguments for call in c.calls or [])
            return "positional_args" if present else "documented_default"
        if "got NoneType" in msg:
            return "null_for_omitted"
        if et == "type_error:nested" or re.search(
            r"Expected type float, got int|inner type <class 'float'>", msg
        ):
            return "int_for_float"
        if cat in ("java", "javascript") and et.startswith(("type_error", "value_error")):
            return "language_encoding"
        if et == "type_error:simple":
            return "call_format"  # BFCL's decoder re-typed a quoted value ('2022' -> 2022)
        if et == "value_error:list/tuple":
            return "array_as_multiset"
        if et.startswith("value_error"):
            return "explicit_default" if _is_documented_default(example, msg, c) else "string_canonical"
        if et.endswith("unexpected_param"):
            return "explicit_default"
        if et.startswith(("executable_checker", "simple_exec_checker", "value_error:exec")):
            return "execution"
        if et.endswith("cannot_find_match"):
            return "parallel_value"
        return "unexplained"
    # BFCL: valid; we: wrong
    if cat == "relevance":
        return _relevance_call_class(example, c)
    if c.verdict.reason == "decode_error":
        return "decode_difference"
    if cat.startswith("executable_"):
        return "execution_equivalent"
    failed = failed_argument(example, c)
    if failed is not None:
        value, acceptable = failed
        if any(_bfcl_equal(value, a) for a in acceptable):
            return "bfcl_string_standardisation"
        if cat in ("java", "javascript") and isinstance(value, str):
            return "bfcl_invalid_literal_accepted"
    return "unexplained"


_FENCE = re.compile(r"^\[?\s*['\"]?```[\w-]*\s*")
_PARAM = re.compile(r"parameter '([^']+)'")


def _is_documented_default(example: Example, msg: str, c: Checked) -> bool:
    """Whether the value BFCL rejected is the parameter's documented default."""
    from data.verify.defaults import NO_DEFAULT, documented_default
    from data.verify.values import mismatch

    m = _PARAM.search(msg)
    if not m:
        return False
    for call in c.calls or []:
        tool = next((t for t in example.tools if t.name == call.name), None)
        if tool is None or m.group(1) not in call.arguments:
            continue
        schema = (tool.parameters.get("properties") or {}).get(m.group(1))
        default = documented_default(schema)
        if default is not NO_DEFAULT and mismatch(call.arguments[m.group(1)], default, schema) is None:
            return True
    return False


def _relevance_call_class(example: Example, c: Checked) -> str:
    if c.verdict.reason != "no_call_expected":
        return "unexplained"
    tools = {t.name for t in example.tools} | {t.name.replace(".", "_") for t in example.tools}
    names = [call.name for call in c.calls or []]
    if c.decoder in _STRUCTURED_DECODERS or any(n in tools for n in names):
        return "relevance_call_made"
    raw = c.row.raw
    if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        raw = "\n".join(raw)  # text parts (Gemini)
    raw = raw if isinstance(raw, str) else json.dumps(raw)
    # The output opens with the call (after any code fence and brackets): a call attempt, not prose.
    head = _FENCE.sub("", raw.strip(), count=1).lstrip(" \n\t[`'\"").replace("\\_", "_")
    return "relevance_call_made" if names and head.startswith(names[0]) else "decoder_code_in_prose"


def failed_argument(example: Example, c: Checked) -> tuple[Any, list] | None:
    """The value our verdict names and its acceptable values, from the decoded call."""
    m = _FAILED_ARG.match(c.verdict.detail)
    if not m or not c.calls:
        return None
    i, fn, arg = int(m.group(1)) - 1, m.group(2), m.group(3)
    if i >= len(c.calls) or arg not in c.calls[i].arguments:
        return None
    acceptable = [
        v
        for alt in example.expected.alternatives
        for call in alt
        if _DEDUP.sub("", call.name) == fn and arg in call.args
        for v in call.args[arg].values
    ]
    return c.calls[i].arguments[arg], acceptable


def _bfcl_equal(v: Any, e: Any) -> bool:
    if isinstance(v, str) and isinstance(e, str):
        return bfcl_standardise(v) == bfcl_standardise(e)
    if isinstance(v, list) and isinstance(e, list):
        return len(v) == len(e) and all(_bfcl_equal(a, b) for a, b in zip(v, e))
    if isinstance(v, dict) and isinstance(e, dict):
        return v.keys() == e.keys() and all(
            _bfcl_equal(v[k], e[k]) or (isinstance(e[k], list) and any(_bfcl_equal(v[k], x) for x in e[k]))
            for k in e
        )
    return v == e


@dataclass
class AgreementReport:
    total: Counter = field(default_factory=Counter)  # category -> pairs compared
    agree: Counter = field(default_factory=Counter)
    classes: Counter = field(default_factory=Counter)  # class -> count
    class_by_category: Counter = field(default_factory=Counter)  # (class, category) -> count
    examples: dict[str, dict] = field(default_factory=dict)  # class -> first example
    rows: list[dict] = field(default_factory=list)  # every disagreement
    unmatched: list[str] = field(default_factory=list)  # outputs with no BFCL verdict
    # Pairs where BFCL's decoder read calls (no decoder error, not relevance): the
    # verifier-to-checker comparison without the two decoders' format rules.
    decoded_total: int = 0
    decoded_agree: int = 0

    @property
    def compared(self) -> int:
        return sum(self.total.values())

    @property
    def overall(self) -> float:
        return sum(self.agree.values()) / max(1, self.compared)

    def rate(self, category: str) -> float:
        return self.agree[category] / max(1, self.total[category])

    def by_cause(self) -> Counter:
        out: Counter = Counter({c: 0 for c in CAUSES})
        for k, n in self.classes.items():
            out[CLASSES[k][0]] += n
        return out


def load_verdicts(path: str | Path) -> dict[tuple[str, str], dict]:
    path = Path(path)
    if not path.exists():
        raise DataError(
            "no such verdicts file", path=path, hint="see outputs.checker_verdicts in configs/data.yaml"
        )
    out = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            try:
                d = json.loads(line)
                out[(d["model"], d["id"])] = d
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise DataError(f"bad verdict line: {e}", path=path, line=n, field="model/id") from None
    return out


def verdict_id(example_id: str) -> str:
    """The verdicts-file id for one of our BFCL v1 example ids (see RELEVANCE_ID_SHIFT)."""
    qid = example_id.split(":", 1)[1]
    if qid.startswith("relevance_"):
        return f"relevance_{int(qid.rsplit('_', 1)[1]) + RELEVANCE_ID_SHIFT}"
    return qid


def compare(
    checked: list[Checked], verdicts: dict[tuple[str, str], dict], examples: dict[str, Example]
) -> AgreementReport:
    rep = AgreementReport()
    for c in checked:
        ex = examples[c.row.example_id]
        b = verdicts.get((c.row.model, verdict_id(c.row.example_id)))
        if b is None:
            rep.unmatched.append(f"{c.row.model}/{c.row.example_id}")
            continue
        rep.total[ex.category] += 1
        both_decoded = (
            ex.category != "relevance"
            and c.calls is not None
            and not (b.get("error_type") or "").startswith(_DECODER_ERRORS)
        )
        rep.decoded_total += both_decoded
        if b["valid"] == c.verdict.correct:
            rep.agree[ex.category] += 1
            rep.decoded_agree += both_decoded
            continue
        cls = classify(ex, b, c)
        rep.classes[cls] += 1
        rep.class_by_category[(cls, ex.category)] += 1
        row = {
            "model": c.row.model,
            "id": c.row.example_id,
            "category": ex.category,
            "bfcl_valid": b["valid"],
            "bfcl_error_type": b.get("error_type") or "",
            "bfcl_error": (b.get("error") or "")[:200],
            "our_correct": c.verdict.correct,
            "our_reason": c.verdict.reason,
            "our_detail": c.verdict.detail[:300],
            "cause": CLASSES[cls][0],
            "class": cls,
            "decoder": c.decoder or "",
            "raw": (c.row.raw if isinstance(c.row.raw, str) else json.dumps(c.row.raw))[:300],
        }
        rep.rows.append(row)
        rep.examples.setdefault(cls, row)
    return rep


def run_agreement(
    bfcl_dir: str | Path, outputs_dir: str | Path, verdicts_path: str | Path
) -> AgreementReport:
    examples, prepared = load_bfcl_v1(bfcl_dir)
    checked = decode_and_verify(read_recorded_rows(outputs_dir), examples, prepared)
    return compare(checked, load_verdicts(verdicts_path), examples)


def write_agreement_report(rep: AgreementReport, out_dir: str | Path) -> tuple[Path, Path]:
    """`agreement.md` (rates, classes with counts and one example each) and `agreement.csv` (every disagreement)."""
    import csv

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "agreement.csv"
    cols = [
        "cause",
        "class",
        "category",
        "model",
        "id",
        "bfcl_valid",
        "bfcl_error_type",
        "bfcl_error",
        "our_correct",
        "our_reason",
        "our_detail",
        "decoder",
        "raw",
    ]
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in sorted(rep.rows, key=lambda r: (CAUSES.index(r["cause"]), r["class"], r["id"], r["model"])):
            w.writerow(r)
    md = [
        "# Verifier vs BFCL v1 checker: agreement",
        "",
        (
            f"Pairs compared: {rep.compared:,} (71 models x 1,630 queries, less {len(rep.unmatched)} outputs "
            f"with no verdict: relevance verdicts are shifted by {RELEVANCE_ID_SHIFT}, see data/verify/bfcl_agreement.py)."
        ),
        "",
        f"**Overall agreement: {rep.overall:.2%}** ({sum(rep.agree.values()):,} / {rep.compared:,}).",
        (
            f"Where BFCL's decoder read calls (its format rules aside): "
            f"{rep.decoded_agree / max(1, rep.decoded_total):.2%} ({rep.decoded_agree:,} / {rep.decoded_total:,})."
        ),
        "",
        "| category | pairs | agreement |",
        "|---|---:|---:|",
        *[f"| {cat} | {rep.total[cat]:,} | {rep.rate(cat):.2%} |" for cat in sorted(rep.total)],
        "",
        "## Disagreements by cause",
        "",
        "| cause | count |",
        "|---|---:|",
        *[f"| {cause} | {n:,} |" for cause, n in rep.by_cause().items()],
        "",
        "## Disagreement classes",
        "",
        "| cause | class | count | rule that decides it |",
        "|---|---|---:|---|",
    ]
    order = sorted(rep.classes, key=lambda k: (CAUSES.index(CLASSES[k][0]), -rep.classes[k]))
    md += [f"| {CLASSES[k][0]} | `{k}` | {rep.classes[k]:,} | {CLASSES[k][1]} |" for k in order]
    md += ["", "## One example per class", ""]
    for k in order:
        r = rep.examples[k]
        md += [
            f"### `{k}` ({CLASSES[k][0]}, {rep.classes[k]:,})",
            "",
            f"- {r['model']} / {r['id']} ({r['category']})",
            f"- output: `{_md(r['raw'][:240])}`",
            f"- BFCL: valid={r['bfcl_valid']} {r['bfcl_error_type']} {_md(r['bfcl_error'][:160])}",
            f"- ours: correct={r['our_correct']} {r['our_reason']} {_md(r['our_detail'][:160])}",
            "",
        ]
    md_path = out / "agreement.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    return md_path, csv_path


def _md(s: str) -> str:
    return s.replace("`", "'").replace("\n", "\\n").replace("|", "\\|")
