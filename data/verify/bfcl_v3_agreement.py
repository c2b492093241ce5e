"""Our verifier against BFCL's own checker on the 2025 BFCL v3 run: 15 models x 3,641 queries.

    switchcraft verify-agreement --source bfcl_v3 --run-dir runs/v3       # agreement_v3.md, agreement_v3.csv
    switchcraft verify-agreement --source bfcl_v3 --sample 50 --seed 0    # + agreement_v3_sample.csv
    from data.verify.bfcl_v3_agreement import run_v3_agreement, write_v3_report
    run = "../shared/data/bfcl_v3_pool_outputs_2025-08"
    rep = run_v3_agreement(f"{run}/data", f"{run}/outputs", f"{run}/checker_verdicts.jsonl",
                           v1_questions="../shared/data/bfcl_v1")

For every (model, query) BFCL judged (`checker_verdicts.jsonl`), our label (the project's decoders and
verifier on the recorded output, `bfcl_v3` examples) is set against BFCL's verdict, per category.

An output that is an inference error is no answer (`no_answer`): we label it wrong, and it says nothing about
how either side reads calls, so it is counted apart, never compared as a wrong call. BFCL passes most of them
(384 of 497 on this run): where no call is expected, an error text is no call to its checker.

Every disagreement gets one class of `CLASSES`: BFCL v1's (`data.verify.bfcl_agreement`), by the same rules,
v3's `irrelevance` and `live_irrelevance` taking v1 relevance's part (no call expected); and v3's own:
on `live_relevance` (any call is right) BFCL's decoder failing on a call ours reads is `call_format`;
`bfcl_passed_wrong_answer`, `repeated_argument` and `spacing_variant` (see their rules). A fourth cause, `other_run_verdict`: a
model whose recordings are a function-calling run (`fc_run_models`) has verdicts of another, prompt-mode run
(they quote values its recorded outputs do not have), so its disagreements compare two answers, not two checkers,
and its text answers are no call (as for a `prompt_style: native` model in `data.labels`); each row keeps the class the rules would give (`rule_class`), and `own_overall` is the agreement without them.
Per model, our accuracy and BFCL's, over every query BFCL judged (no answer is wrong for us, as recorded for
BFCL). With BFCL v1's questions, v3's answer revisions are measured too (`bfcl_v3_revisions`).
"""

from __future__ import annotations

import csv
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from data.decoders import NATIVE_TEXT, is_no_answer
from data.recorded import import_recorded
from data.schema import Example, Output
from data.sources import read_source
from data.verify import language_of, prepare, verify
from data.verify.batch import Checked, RecordedRow, is_text
from data.verify.bfcl_agreement import BUG, LENIENT, STRICT, AgreementReport, classify, failed_argument, load_verdicts
from data.verify.canon import canon_string
from data.verify.bfcl_agreement import CLASSES as V1_CLASSES
from data.verify.bfcl_v3_revisions import Revisions, find_revisions

OTHER_RUN = "verdict of another run"
CAUSES = (STRICT, LENIENT, BUG, OTHER_RUN)
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
        "the recorded output.",
    ),
    "other_run_verdict": (
        OTHER_RUN,
        "The model's recordings are a function-calling run (calls stored in BFCL's FC result format, a list of "
        "{function: JSON arguments}, which the prompt-mode decoder these verdicts came from cannot read), while its "
        "verdicts are of a prompt-mode run's outputs: they quote values and errors the recorded output does not "
        "have. Such a pair compares two different answers; no checker rule is in question.",
    ),
    "spacing_variant": (
        BUG,
        "Strings that differ only in spacing ('Hanoi' / 'Ha Noi', 'echo. > C:\\testing.txt' / 'echo.>C:\\testing.txt'): "
        "the same in meaning where found, but spacing inside a string is significant to our string rule (it can change "
        "meaning: 'ls -l' / 'ls-l'), while BFCL, which deletes spaces, passes them. A known limit, left as is.",
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
    model_total: Counter = field(default_factory=Counter)  # model -> pairs compared
    model_agree: Counter = field(default_factory=Counter)
    other_run: set[str] = field(default_factory=set)  # models whose verdicts are of another run (`other_run_verdict`)
    own_total: Counter = field(default_factory=Counter)  # category -> pairs of the other models
    own_agree: Counter = field(default_factory=Counter)
    revisions: Revisions | None = None  # v3's answers against v1's, when v1's questions were given
    seconds: float = 0.0

    def by_cause(self) -> Counter:
        return Counter({cause: sum(n for k, n in self.classes.items() if CLASSES[k][0] == cause) for cause in CAUSES})

    @property
    def own_overall(self) -> float:
        """Agreement over the models whose verdicts are of their recorded outputs."""
        return sum(self.own_agree.values()) / max(1, sum(self.own_total.values()))


def fc_run_models(outputs: list[Output]) -> set[str]:
    """Models with any output in BFCL's function-calling result format (read by the `native_fc` decoder): their
    recordings are an FC run, not the prompt-mode run whose checker verdicts the verdicts file holds."""
    return {o.model for o in outputs if o.decoder == "native_fc"}


def classify_v3(example: Example, bfcl: dict, c: Checked, other_run: bool = False) -> str:
    """The disagreement class of one v3 pair (see the module docstring); `other_run`: the model's verdicts are of
    another run's outputs (`fc_run_models`)."""
    if other_run:
        return "other_run_verdict"
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
    if cls == "bfcl_string_standardisation" and _spacing_only(example, c):
        return "spacing_variant"
    return cls


def _spacing_only(example: Example, c: Checked) -> bool:
    """Whether the failed string equals an acceptable one once spaces are deleted (and nothing else)."""
    failed = failed_argument(example, c)
    if failed is None or not isinstance(failed[0], str):
        return False
    key = canon_string(failed[0]).replace(" ", "")
    return any(isinstance(a, str) and canon_string(a).replace(" ", "") == key for a in failed[1])


def compare_v3(outputs: list[Output], examples: dict[str, Example], verdicts: dict[tuple[str, str], dict],
               revisions: Revisions | None = None) -> V3Agreement:
    """Our labels against BFCL's verdicts, pair by pair; with `revisions`, each output of a query whose answer v3
    revised is also verified against v1's answer (counted in `rep.revisions`, never used for the labels)."""
    rep = V3Agreement(revisions=revisions, other_run=fc_run_models(outputs))
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
        if o.model in rep.other_run and is_text(o.raw) and not is_no_answer(o.decode_error):
            # A function-calling run's text is no tool call, whatever code it shows (as for `prompt_style: native`).
            o = o.model_copy(update={"calls": None, "decode_error": NATIVE_TEXT, "decoder": None})
        v = verify(p, o.calls, o.decode_error)
        rep.judged[o.model] += 1
        rep.ours[o.model] += v.correct
        rep.bfcl[o.model] += bool(b["valid"])
        if o.calls is None and is_no_answer(o.decode_error):
            rep.no_answer[ex.category] += 1
            rep.no_answer_passed[ex.category] += bool(b["valid"])
            continue
        rep.total[ex.category] += 1
        rep.model_total[o.model] += 1
        own = o.model not in rep.other_run
        rep.own_total[ex.category] += own
        if revisions is not None and ex.id in revisions.answers:
            _count_revision(revisions, prepared, revisions.answers[ex.id], o, bool(b["valid"]), v.correct)
        if b["valid"] == v.correct:
            rep.agree[ex.category] += 1
            rep.model_agree[o.model] += 1
            rep.own_agree[ex.category] += own
            continue
        c = Checked(RecordedRow(o.model, o.example_id, o.raw), o.decoder, o.decode_error, o.calls, v)
        rule_cls = classify_v3(ex, b, c)  # what the checker rules say, the run aside
        cls = rule_cls if own else "other_run_verdict"
        rep.classes[cls] += 1
        rep.class_by_category[(cls, ex.category)] += 1
        rep.rows.append({
            "cause": CLASSES[cls][0], "class": cls, "category": ex.category, "model": o.model, "id": ex.id,
            "bfcl_valid": b["valid"], "bfcl_error_type": b.get("error_type") or "", "bfcl_error": (b.get("error") or "")[:200],
            "our_correct": v.correct, "our_reason": v.reason, "our_detail": v.detail[:300], "decoder": o.decoder or "",
            "raw": (o.raw if isinstance(o.raw, str) else repr(o.raw))[:300], "rule_class": rule_cls})
    return rep


def _count_revision(rev: Revisions, prepared: dict, old: Example, o: Output, bfcl_valid: bool, ours: bool) -> None:
    p = prepared.get(old.id)
    if p is None:
        p = prepared[old.id] = prepare(old.expected, old.tools, language=language_of(old))
    ours_v1 = verify(p, o.calls, o.decode_error).correct
    rev.pairs += 1
    rev.flipped += ours_v1 != ours
    rev.agree_v3 += ours == bfcl_valid
    rev.agree_v1 += ours_v1 == bfcl_valid


def run_v3_agreement(questions: str | Path, outputs: str | Path, verdicts: str | Path,
                     v1_questions: str | Path | None = None) -> V3Agreement:
    """Ingest the questions, import the outputs and compare with the verdicts (see the module docstring);
    with `v1_questions` (a BFCL v1 folder), also measure v3's answer revisions (`bfcl_v3_revisions`)."""
    t0 = time.perf_counter()
    examples = {e.id: e for e in read_source("bfcl_v3", str(questions))}
    revisions = None
    if v1_questions is not None:
        revisions = find_revisions(examples, {e.id: e for e in read_source("bfcl_v1", str(v1_questions))})
    recorded = import_recorded(outputs, layout="bfcl_v3", examples=examples, progress=False)
    rep = compare_v3(recorded, examples, load_verdicts(verdicts), revisions)
    rep.seconds = time.perf_counter() - t0
    return rep


def sample_disagreements(rows: list[dict], n: int = 50, seed: int = 0) -> list[dict]:
    """A seeded sample of `n` disagreements, stratified over categories: two from each category (or all it has),
    the rest shared in proportion to each category's disagreements (largest remainders); within a category,
    drawn at random (seeded by the seed and the category) from its rows in (id, model) order, so the same rows and seed give the same sample."""
    by_cat: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["category"], r["id"], r["model"])):
        by_cat.setdefault(r["category"], []).append(r)
    quota = {c: min(2, len(rs)) for c, rs in by_cat.items()}
    rest = min(n, len(rows)) - sum(quota.values())
    room = {c: len(rs) - quota[c] for c, rs in by_cat.items()}
    if rest > 0 and sum(room.values()):
        ideal = {c: rest * k / sum(room.values()) for c, k in room.items()}
        share = {c: int(x) for c, x in ideal.items()}
        for c in sorted(ideal, key=lambda c: (share[c] - ideal[c], c))[: rest - sum(share.values())]:
            share[c] += 1
        quota = {c: q + min(share[c], room[c]) for c, q in quota.items()}
    return [r for c in sorted(by_cat) for r in random.Random(f"{seed}:{c}").sample(by_cat[c], quota[c])]


def category_table(rep: V3Agreement) -> tuple[list[str], list[list[str]]]:
    """Per category (and all): pairs, agreement, disagreements by cause, inference errors (and BFCL's passes)."""
    head = ["category", "pairs", "agreement", "agreement, own-run verdicts", *CAUSES, "no answer",
            "no answer BFCL passed"]
    rows = []
    for c in [*sorted(rep.total), None]:
        cats = [c] if c else list(rep.total)
        causes = Counter()
        for (k, cat), n in rep.class_by_category.items():
            if cat in cats:
                causes[CLASSES[k][0]] += n
        pairs, agree = sum(rep.total[x] for x in cats), sum(rep.agree[x] for x in cats)
        own = sum(rep.own_agree[x] for x in cats) / max(1, sum(rep.own_total[x] for x in cats))
        rows.append([c or "all", f"{pairs:,}", f"{agree / max(1, pairs):.2%}", f"{own:.2%}", *[f"{causes[k]:,}" for k in CAUSES],
                     f"{sum(rep.no_answer[x] for x in cats):,}", f"{sum(rep.no_answer_passed[x] for x in cats):,}"])
    return head, rows


def model_table(rep: V3Agreement) -> tuple[list[str], list[list[str]]]:
    """Per model: queries BFCL judged, pairs compared, agreement, our accuracy and BFCL's."""
    head = ["model", "queries", "pairs", "agreement", "our accuracy", "BFCL's accuracy"]
    return head, [[m + (" (verdicts of another run)" if m in rep.other_run else ""), f"{n:,}", f"{rep.model_total[m]:,}", f"{rep.model_agree[m] / max(1, rep.model_total[m]):.2%}",
                   f"{rep.ours[m] / n:.3f}", f"{rep.bfcl[m] / n:.3f}"] for m, n in sorted(rep.judged.items())]


def class_table(rep: V3Agreement) -> tuple[list[str], list[list[str]]]:
    """Every class with disagreements: cause, count, and the categories it falls in (largest first)."""
    head = ["cause", "class", "count", "categories"]
    rows = []
    for k in sorted(rep.classes, key=lambda k: (CAUSES.index(CLASSES[k][0]), -rep.classes[k], k)):
        cats = sorted(((n, c) for (kk, c), n in rep.class_by_category.items() if kk == k), reverse=True)
        rows.append([CLASSES[k][0], k, f"{rep.classes[k]:,}", ", ".join(f"{c} {n:,}" for n, c in cats)])
    return head, rows


def revision_lines(rep: V3Agreement) -> list[str]:
    """What v3's revisions of the v1 questions change (empty without v1's questions)."""
    r = rep.revisions
    if r is None:
        return []
    per = ", ".join(f"{c} {r.answer[c]}" for c in sorted(r.answer) if r.answer[c])
    return [
        f"v3 answer revisions: {sum(r.answer.values())} of {sum(r.matched.values()):,} non-live queries have another "
        f"answer than in v1 ({per}); {sum(r.question.values())} another question text, {sum(r.tools.values())} "
        f"other tools. Labels use v3's answers.",
        f"On their {r.pairs:,} compared pairs: {r.flipped} of our labels differ from a v1-answer label; agreement "
        f"with BFCL {r.agree_v3 / max(1, r.pairs):.2%} with v3's answers, {r.agree_v1 / max(1, r.pairs):.2%} "
        f"had we kept v1's.",
    ]


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---" if i == 0 or h in ("class", "categories", "cause") else "---:" for i, h in enumerate(head)]
    return ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|", *["| " + " | ".join(r) + " |" for r in rows]]


def write_v3_report(rep: V3Agreement, out_dir: str | Path, sample: list[dict] | None = None) -> tuple[Path, Path]:
    """`agreement_v3.md` (rates per category and per model, disagreements by cause and class, answer revisions),
    `agreement_v3.csv` (every disagreement) and, with `sample`, `agreement_v3_sample.csv` (those rows)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "agreement_v3.csv"
    _write_rows(csv_path, sorted(rep.rows, key=lambda r: (CAUSES.index(r["cause"]), r["class"], r["id"], r["model"])))
    if sample is not None:
        _write_rows(out / "agreement_v3_sample.csv", sample)
    md = [
        "# Verifier vs BFCL v3 checker: agreement (2025 run, 15 models x 3,641 queries)", "",
        f"Pairs compared: {rep.compared:,}; inference errors left out (no answer): {sum(rep.no_answer.values()):,}, "
        f"of which BFCL passed {sum(rep.no_answer_passed.values()):,} (where no call is expected, an error text is "
        f"no call to BFCL). **Agreement: {rep.overall:.2%}**; {rep.own_overall:.2%} over the "
        f"{len(rep.model_total) - len(rep.other_run)} models whose verdicts are of their recorded outputs "
        f"({', '.join(sorted(rep.other_run)) or 'none'}: verdicts of another run, class `other_run_verdict`).", "",
        *_md_table(*category_table(rep)), "", *_md_table(*model_table(rep)), "",
        *_md_table(*class_table(rep)), "", *revision_lines(rep),
    ]
    md_path = out / "agreement_v3.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    return md_path, csv_path


def _write_rows(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["class"])
        w.writeheader()
        w.writerows(rows)
