"""Our verifier against BFCL's own checker on the 2025 BFCL v3 run: 15 models x 3,641 queries.

    switchcraft verify-agreement --source bfcl_v3 --run-dir runs/v3       # agreement_v3.md, agreement_v3.csv
    from data.verify.bfcl_v3_agreement import run_v3_agreement, write_v3_report
    run = "../shared/data/bfcl_v3_pool_outputs_2025-08"
    rep = run_v3_agreement(f"{run}/data", f"{run}/outputs", f"{run}/checker_verdicts.jsonl")

For every (model, query) BFCL judged (`checker_verdicts.jsonl`), our label (the project's decoders and
verifier on the recorded output, `bfcl_v3` examples) is set against BFCL's verdict, per category.

An output that is an inference error is no answer (`no_answer`): we label it wrong, and it says nothing about
how either side reads calls, so it is counted apart, never compared as a wrong call. BFCL passes most of them
(384 of 497 on this run): where no call is expected, an error text is no call to its checker.

Every disagreement gets one class of `CLASSES`: BFCL v1's (`data.verify.bfcl_agreement`), by the same rules,
v3's `irrelevance` and `live_irrelevance` taking v1 relevance's part (no call expected); and v3's own:
on `live_relevance` (any call is right) BFCL's decoder failing on a call ours reads is `call_format`;
`bfcl_passed_wrong_answer` and `repeated_argument` (see their rules). Per model, our accuracy and BFCL's,
over every query BFCL judged (no answer is wrong for us, as recorded for BFCL).
"""

from __future__ import annotations

import csv
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from data.decoders import is_no_answer
from data.recorded import import_recorded
from data.schema import Example, Output
from data.sources import read_source
from data.verify import language_of, prepare, verify
from data.verify.batch import Checked, RecordedRow
from data.verify.bfcl_agreement import CAUSES, LENIENT, AgreementReport, classify, load_verdicts
from data.verify.bfcl_agreement import CLASSES as V1_CLASSES

NO_CALL_CATEGORIES = ("irrelevance", "live_irrelevance")
ANY_CALL_CATEGORIES = ("live_relevance",)
# Our reasons that say the output's calls are not the answer's (none is a format or value-equivalence rule).
_ANSWER_DIFFERS = ("decode_error", "call_expected", "wrong_count", "wrong_function", "missing_required",
                   "missing_expected", "unexpected_param")
CLASSES: dict[str, tuple[str, str]] = {
    **V1_CLASSES,
    "bfcl_passed_wrong_answer": (
        LENIENT,
        "BFCL passed an output that does not give its own answer: prose with no call where a call is expected, fewer "
        "or other calls, a required argument left out, or a value that differs from every acceptable one even under "
        "BFCL's string standardisation. No rule of BFCL's checker passes such an output, so the verdict cannot be of "
        "the recorded output (on this run nearly all are two models', whose verdicts look computed on other outputs).",
    ),
    "repeated_argument": (
        LENIENT,
        "BFCL read a call that names one argument twice (`f(a=1, a=2)`: not Python, and which value was meant is "
        "unknown); our decoder refuses it.",
    ),
}


@dataclass
class V3Agreement(AgreementReport):
    """BFCL v1's agreement report (`total`, `agree`, `classes`, `rows`, `unmatched`, rates) with v3's counts."""

    no_answer: Counter = field(default_factory=Counter)  # category -> inference errors (not compared)
    no_answer_passed: Counter = field(default_factory=Counter)  # category -> of those, BFCL's valid verdicts
    ours: Counter = field(default_factory=Counter)  # model -> our correct labels (queries BFCL judged)
    bfcl: Counter = field(default_factory=Counter)  # model -> BFCL's valid verdicts
    judged: Counter = field(default_factory=Counter)  # model -> queries BFCL judged
    seconds: float = 0.0

    def by_cause(self) -> Counter:
        return Counter({cause: sum(n for k, n in self.classes.items() if CLASSES[k][0] == cause) for cause in CAUSES})


def classify_v3(example: Example, bfcl: dict, c: Checked) -> str:
    """The disagreement class of one v3 pair (see the module docstring)."""
    if example.category in ANY_CALL_CATEGORIES and not bfcl["valid"] and c.verdict.correct:
        return "call_format"
    if example.category in NO_CALL_CATEGORIES:
        example = example.model_copy(update={"category": "relevance"})
    cls = classify(example, bfcl, c)
    if cls in ("unexplained", "decode_difference") and bfcl["valid"] and not c.verdict.correct:
        if "given twice" in (c.decode_error or ""):
            return "repeated_argument"
        text_only = c.verdict.reason == "decode_error" and (c.decode_error or "").startswith("no_call:")  # no call attempt
        positional = "'_pos" in c.verdict.detail  # an argument given by position that binds to no parameter
        differs = c.verdict.reason in _ANSWER_DIFFERS[1:] or c.verdict.reason.startswith("value_error")
        if text_only or differs and not positional:
            return "bfcl_passed_wrong_answer"
    return cls


def compare_v3(outputs: list[Output], examples: dict[str, Example], verdicts: dict[tuple[str, str], dict]) -> V3Agreement:
    rep = V3Agreement()
    prepared = {}
    for o in outputs:
        ex = examples[o.example_id]
        b = verdicts.get((o.model, ex.id.split(":", 1)[1]))
        if b is None:
            rep.unmatched.append(f"{o.model}/{o.example_id}")  # grok-4 has no score files
            continue
        p = prepared.get(ex.id)
        if p is None:
            p = prepared[ex.id] = prepare(ex.expected, ex.tools, language=language_of(ex))
        v = verify(p, o.calls, o.decode_error)
        rep.judged[o.model] += 1
        rep.ours[o.model] += v.correct
        rep.bfcl[o.model] += bool(b["valid"])
        if o.calls is None and is_no_answer(o.decode_error):
            rep.no_answer[ex.category] += 1
            rep.no_answer_passed[ex.category] += bool(b["valid"])
            continue
        rep.total[ex.category] += 1
        if b["valid"] == v.correct:
            rep.agree[ex.category] += 1
            continue
        c = Checked(RecordedRow(o.model, o.example_id, o.raw), o.decoder, o.decode_error, o.calls, v)
        cls = classify_v3(ex, b, c)
        rep.classes[cls] += 1
        rep.rows.append({
            "cause": CLASSES[cls][0], "class": cls, "category": ex.category, "model": o.model, "id": ex.id,
            "bfcl_valid": b["valid"], "bfcl_error_type": b.get("error_type") or "", "bfcl_error": (b.get("error") or "")[:200],
            "our_correct": v.correct, "our_reason": v.reason, "our_detail": v.detail[:300], "decoder": o.decoder or "",
            "raw": (o.raw if isinstance(o.raw, str) else repr(o.raw))[:300]})
    return rep


def run_v3_agreement(questions: str | Path, outputs: str | Path, verdicts: str | Path) -> V3Agreement:
    """Ingest the questions, import the outputs and compare with the verdicts (see the module docstring)."""
    t0 = time.perf_counter()
    examples = {e.id: e for e in read_source("bfcl_v3", str(questions))}
    recorded = import_recorded(outputs, layout="bfcl_v3", examples=examples, progress=False)
    rep = compare_v3(recorded, examples, load_verdicts(verdicts))
    rep.seconds = time.perf_counter() - t0
    return rep


def write_v3_report(rep: V3Agreement, out_dir: str | Path) -> tuple[Path, Path]:
    """`agreement_v3.md` (rates per category, per model, disagreements by cause and class) and
    `agreement_v3.csv` (every disagreement)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "agreement_v3.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rep.rows[0]) if rep.rows else ["class"])
        w.writeheader()
        w.writerows(sorted(rep.rows, key=lambda r: (CAUSES.index(r["cause"]), r["class"], r["id"], r["model"])))
    md = [
        "# Verifier vs BFCL v3 checker: agreement (2025 run, 15 models x 3,641 queries)", "",
        f"Pairs compared: {rep.compared:,}; inference errors left out (no answer): {sum(rep.no_answer.values()):,}, "
        f"of which BFCL passed {sum(rep.no_answer_passed.values()):,} (where no call is expected, an error text is "
        f"no call to BFCL). **Agreement: {rep.overall:.2%}**.", "",
        "| category | pairs | agreement | no answer | no answer BFCL passed |", "|---|---:|---:|---:|---:|",
        *[f"| {c} | {rep.total[c]:,} | {rep.rate(c):.2%} | {rep.no_answer[c]:,} | {rep.no_answer_passed[c]:,} |"
          for c in sorted(rep.total)], "",
        "| model | queries | our accuracy | BFCL's accuracy |", "|---|---:|---:|---:|",
        *[f"| {m} | {n:,} | {rep.ours[m] / n:.3f} | {rep.bfcl[m] / n:.3f} |" for m, n in sorted(rep.judged.items())], "",
        "| cause | disagreements |", "|---|---:|", *[f"| {c} | {n:,} |" for c, n in rep.by_cause().items()], "",
        "| cause | class | count |", "|---|---|---:|",
        *[f"| {CLASSES[k][0]} | `{k}` | {n:,} |" for k, n in sorted(rep.classes.items(), key=lambda kv: -kv[1])],
    ]
    md_path = out / "agreement_v3.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    return md_path, csv_path
