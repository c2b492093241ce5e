"""The verifier's commands: `verify`, `label` and `verify-agreement` (`bench verify` is in cli_bench.py).

switchcraft verify CASES.jsonl [--out FILE]
switchcraft label --pool configs/pool.yaml [--outputs PATH] [--run-dir runs/default]
switchcraft label --consensus [--truth LABELS.parquet]     # no ground truth: agreement among the pool (data/consensus.py)
switchcraft verify-agreement [--run-dir runs/default]
switchcraft verify-agreement --source bfcl_v3 --run-dir runs/v3 [--sample 50 --seed 0]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from data.errors import DataError
from switchcraft.console import fail


def _data_paths(config: Path, data_root: str | None) -> DataConfig:  # noqa: F821 - imported lazily
    from data.config import load_data_config

    try:
        return load_data_config(config, data_root=data_root)
    except DataError as e:
        fail(str(e))


def verify_command(
    cases: Path = typer.Argument(
        ..., help="JSON Lines: {id, tools, expected, output} per line ('-' for stdin)."
    ),
    out: Path = typer.Option(None, "--out", "-o", help="Write verdict lines here (default: stdout)."),
) -> None:
    """Verify tool-call outputs: one {id, correct, reason, detail} line per case, in order."""
    from collections import Counter

    from data.verify.cases import verify_cases

    if str(cases) != "-" and not cases.exists():
        fail(f"{cases}: no such file")
    src = sys.stdin if str(cases) == "-" else cases.open(encoding="utf-8")
    sink = out.open("w", encoding="utf-8") if out else sys.stdout
    reasons: Counter = Counter()
    try:
        for result in verify_cases(src):
            reasons[result["reason"]] += 1
            sink.write(json.dumps(result, ensure_ascii=False) + "\n")
    finally:
        if out:
            sink.close()
        if src is not sys.stdin:
            src.close()
    if out:
        total = sum(reasons.values())
        summary = ", ".join(f"{k} {n}" for k, n in reasons.most_common())
        typer.echo(f"wrote {out}: {total} verdicts ({summary})", err=True)


def label_command(
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="Pool config (models and prices)."),
    outputs: str = typer.Option(
        None, help="outputs.parquet or a folder of recordings (default: the data config's outputs.bfcl_v1)."
    ),
    examples: str = typer.Option(
        None, help="examples.parquet or a BFCL v1 folder (default: the data config's sources.bfcl_v1)."
    ),
    run_dir: Path = typer.Option(Path("runs/default"), help="Where labels.parquet and its summary go."),
    config: Path = typer.Option(Path("configs/data.yaml"), help="Data config."),
    data_root: str = typer.Option(None, help="Override the config's data_root."),
    consensus: bool = typer.Option(
        False, "--consensus", help="No expected answers: label from agreement among the pool's answers."
    ),
    truth: Path = typer.Option(
        None, help="With --consensus: the verifier's labels.parquet to report agreement with "
        "(default: <run-dir>/labels.parquet when it exists)."
    ),
) -> None:
    """Verify every output of every pool model and write labels.parquet with real costs
    (--consensus: labels_consensus.parquet from agreement among the pool's answers, no expected answer)."""
    from rich.console import Console
    from rich.table import Table

    from data.labels import run_labels

    cfg = _data_paths(config, data_root)
    outputs = outputs or cfg.output_path("bfcl_v1")
    examples = examples or cfg.source_path("bfcl_v1")
    if not outputs or not examples:
        fail(
            "no outputs or examples given and none configured (outputs.bfcl_v1, sources.bfcl_v1 in the data config)"
        )
    if consensus:
        _consensus_labels(pool, outputs, examples, run_dir, truth)
        return
    if truth is not None:
        fail("--truth goes with --consensus")
    try:
        run = run_labels(pool, outputs, examples, run_dir, price_file=cfg.output_path("prices"))
    except DataError as e:
        fail(str(e))
    table = Table(title=f"Labels: {run.labels:,} (example x model)")
    for col in ("model", "outputs", "accuracy", "mean cost / query (USD)", "costed"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for s in run.summary:
        cost = f"{s.mean_cost_usd:.6f}" if s.mean_cost_usd is not None else "n/a"
        table.add_row(s.model, f"{s.outputs:,}", f"{s.accuracy:.2%}", cost, f"{s.costed:,}")
    Console(width=120).print(table)
    typer.echo(f"wrote {run.labels_path}, {run.summary_path}, {run.meta_path} in {run.seconds:.1f} s")


def _consensus_labels(pool: Path, outputs: str, examples: str, run_dir: Path, truth: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from data.consensus import run_consensus_labels

    if truth is not None and not truth.exists():
        fail(f"{truth}: no such labels file (--truth)")
    truth = truth if truth is not None else (run_dir / "labels.parquet" if (run_dir / "labels.parquet").exists() else None)
    try:
        run = run_consensus_labels(pool, outputs, examples, run_dir, truth=truth)
    except DataError as e:
        fail(str(e))
    res, agr = run.result, run.agreement
    table = Table(title=f"Consensus labels: {len(res.frame):,} (example x model), no expected answers")
    cols = ["model", "answers", "consensus accuracy", "reliability (call / decline)"]
    cols += ["true accuracy", "agreement"] if agr else []
    for col in cols:
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for m in res.models:
        g = res.frame[res.frame["model"] == m]
        r = res.reliability[m]
        row = [m, f"{len(g):,}", f"{g['correct'].mean():.2%}", f"{r['calling']:.3f} / {r['declining']:.3f}"]
        if agr:
            pm = agr["per_model"].get(m, {})
            row += [f"{pm.get('true_accuracy', float('nan')):.2%}", f"{pm.get('agreement', float('nan')):.2%}"]
        table.add_row(*row)
    Console(width=140).print(table)
    typer.echo(f"abstained (no answer group supported): {int(res.consensus.abstained.sum())} of "
               f"{len(res.example_ids):,} queries; EM iterations: {res.consensus.iterations}")
    if agr:
        typer.echo(f"agreement with the verifier's labels ({truth}): {agr['agreement']:.2%} of {agr['pairs']:,} pairs "
                   f"({agr['agreement_not_abstained']:.2%} where not abstained); accuracy ranking Spearman "
                   f"{agr['accuracy_rank_spearman']:.3f}")
        for cat, v in sorted(agr["per_category"].items()):
            typer.echo(f"  {cat:40s} {v['agreement']:.2%} ({v['pairs']:,})")
    typer.echo(f"wrote {run.labels_path}, {run.meta_path} in {run.seconds:.1f} s")


def agreement_command(
    run_dir: Path = typer.Option(Path("runs/default"), help="Where agreement.md and agreement.csv go."),
    config: Path = typer.Option(Path("configs/data.yaml"), help="Data config."),
    data_root: str = typer.Option(None, help="Override the config's data_root."),
    source: str = typer.Option("bfcl_v1", help="bfcl_v1 (71 models x 1,630 queries) or bfcl_v3 (the 2025 run)."),
    sample: int = typer.Option(0, help="bfcl_v3: also write a seeded sample of this many disagreements, stratified "
                               "over categories (agreement_v3_sample.csv), for checking by hand."),
    seed: int = typer.Option(0, help="bfcl_v3: the sample's seed."),
) -> None:
    """Compare our verdicts with BFCL's checker on all 71 models x 1,630 queries (or the BFCL v3 run of 2025)."""
    from data.verify.bfcl_agreement import run_agreement, write_agreement_report

    cfg = _data_paths(config, data_root)
    if source == "bfcl_v3":
        return _agreement_v3(cfg, run_dir, sample, seed)
    if sample:
        fail("--sample goes with --source bfcl_v3")
    if source != "bfcl_v1":
        fail(f"--source {source!r}: choose bfcl_v1 or bfcl_v3")
    paths = (cfg.source_path("bfcl_v1"), cfg.output_path("bfcl_v1"), cfg.output_path("checker_verdicts"))
    if not all(paths):
        fail("the data config needs sources.bfcl_v1, outputs.bfcl_v1 and outputs.checker_verdicts")
    try:
        rep = run_agreement(*paths)
    except DataError as e:
        fail(str(e))
    _print_agreement(rep, *write_agreement_report(rep, run_dir))


def _print_agreement(rep, md: Path, csv_path: Path, note: str = "") -> None:
    typer.echo(f"overall agreement: {rep.overall:.2%} over {rep.compared:,} pairs{note}")
    for cat in sorted(rep.total):
        typer.echo(f"  {cat:40s} {rep.rate(cat):.2%}")
    for cause, n in rep.by_cause().items():
        typer.echo(f"{cause}: {n:,}")
    typer.echo(f"wrote {md} and {csv_path}")


def _agreement_v3(cfg, run_dir: Path, sample: int, seed: int) -> None:
    from rich.console import Console
    from rich.table import Table

    from data.verify.bfcl_v3_agreement import (category_table, class_table, model_table, revision_lines,
                                               run_v3_agreement, sample_disagreements, write_v3_report)

    paths = (cfg.source_path("bfcl_v3"), cfg.output_path("bfcl_v3"), cfg.output_path("bfcl_v3_checker_verdicts"))
    if not all(paths):
        fail("the data config needs sources.bfcl_v3, outputs.bfcl_v3 and outputs.bfcl_v3_checker_verdicts")
    if sample < 0:
        fail(f"--sample {sample}: give a number of disagreements (0: no sample)")
    try:
        rep = run_v3_agreement(*paths, v1_questions=cfg.source_path("bfcl_v1"))
    except DataError as e:
        fail(str(e))
    drawn = sample_disagreements(rep.rows, sample, seed) if sample else None
    md, csv_path = write_v3_report(rep, run_dir, drawn)
    typer.echo(f"overall agreement: {rep.overall:.2%} over {rep.compared:,} pairs "
               f"({sum(rep.no_answer.values()):,} inference errors not compared); {rep.own_overall:.2%} without "
               f"the models whose verdicts are of another run ({', '.join(sorted(rep.other_run)) or 'none'})")
    console = Console(width=200)
    for title, (head, rows) in (("Per category", category_table(rep)), ("Per model", model_table(rep)),
                                ("Disagreement classes", class_table(rep))):
        table = Table(title=title)
        for i, col in enumerate(head):
            table.add_column(col, justify="left" if i == 0 or col in ("class", "categories") else "right",
                             no_wrap=col != "categories")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for cause, n in rep.by_cause().items():
        typer.echo(f"{cause}: {n:,}")
    for line in revision_lines(rep):
        typer.echo(line)
    extra = f", {run_dir / 'agreement_v3_sample.csv'} ({len(drawn)} disagreements, seed {seed})" if drawn else ""
    typer.echo(f"wrote {md} and {csv_path}{extra}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("verify")(verify_command)
    app.command("label")(label_command)
    app.command("verify-agreement")(agreement_command)
