"""`switchcraft reproduce` (the main job) and `switchcraft evaluate` (the report of a run's held-out predictions).

    switchcraft reproduce --run-dir runs/default                       # the 2025 pool on BFCL v3
    switchcraft reproduce --pool configs/pool.yaml --run-dir runs/bfcl_v1   # the 2024 pool on BFCL v1
    switchcraft evaluate runs/finetune --out runs/finetune/report
    switchcraft readme-table runs/default --check README.md   # the README's table against the run's metrics.json
    switchcraft retest --run-dir runs/bfcl_v1 [--earlier ../shared/data/bfcl_v1_pool_outputs_2024-07-25]

Wiring: `register(app)` adds `reproduce`, `evaluate` and `retest`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from data.errors import DataError
from data.registry import UnknownNameError
from switchcraft.console import console, fail
from switchcraft.tables import print_first_screen


def register(app: typer.Typer) -> None:
    app.command("reproduce")(reproduce)
    app.command("evaluate")(evaluate)
    app.command("retest")(retest)
    app.command("readme-table")(readme_table)


def reproduce(
    run_dir: Path = typer.Option(Path("runs/default"), help="Where everything is written."),
    train_config: Path = typer.Option(Path("configs/train.yaml"), help="Training config."),
    pool: Path = typer.Option(Path("configs/pools/bfcl_v3_2025.yaml"), help="The model pool (its `benchmark:` "
                              "says which; the 2024 BFCL v1 pool: configs/pool.yaml)."),
    data_config: Path = typer.Option(Path("configs/data.yaml"), help="Data config."),
    max_examples: int = typer.Option(None, help="Use a slice of the queries (smoke runs)."),
    folds: int = typer.Option(None, help="Number of folds (default: the training config's)."),
    target: str = typer.Option("match_best", help="τ calibration target: match_best | budget."),
    budget: float = typer.Option(None, help="USD per million queries, for --target budget."),
    knn: bool = typer.Option(True, help="Include the kNN baseline (embeds every query once more)."),
    labels: str = typer.Option("truth", "--labels", help="truth | consensus: also fit everything on consensus labels "
                               "(no expected answers) and score it with the true ones (report: 'Without ground truth')."),
    with_pool: list[Path] = typer.Option(None, "--with-pool", help="A second benchmark's pool (repeatable): run the "
                                         "same job on it into <run-dir>/<benchmark>/, its headline a report section."),
    transfer: bool = typer.Option(True, help="With --with-pool: score each run's router on the other's queries."),
    override: list[str] = typer.Argument(None, help="Training config overrides key=value (e.g. mode=finetune)."),
) -> None:
    """The main job: ingest → import recordings → label → train (k-fold) → evaluate → report."""
    from evaluation.jobs.reproduce import ReproduceOptions
    from evaluation.jobs.reproduce import reproduce as run_reproduce

    if target == "budget" and budget is None:
        fail("--target budget needs --budget USD_PER_MILLION")
    if labels not in ("truth", "consensus"):
        fail(f"--labels {labels!r}: expected truth or consensus")
    opts = ReproduceOptions(run_dir=run_dir, data_config=data_config, pool=pool, train_config=train_config,
                            train_overrides=list(override or []), max_examples=max_examples, folds=folds,
                            target=target, budget_per_million=budget, knn=knn, labels=labels,
                            with_pools=list(with_pool or []), transfer=transfer)
    try:
        result = run_reproduce(opts, console)
    except (DataError, UnknownNameError) as e:
        fail(str(e))
    # The first screen: what an 80-column terminal holds; report.md has every row and column.
    console.rule("[bold]headline (held-out)")
    print_first_screen(console, result.headline, result.report)
    console.print("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in result.timings.items()), highlight=False)


def evaluate(
    run_dir: Path = typer.Argument(..., help="A training run: its oof_predictions.parquet is evaluated."),
    labels: Path = typer.Option(None, help="labels.parquet (default: <run_dir>/labels.parquet, else runs/default's)."),
    examples: Path = typer.Option(None, help="examples.parquet (default: beside the labels)."),
    pool: Path = typer.Option(None, help="The model pool (its order names the columns; default: the one the run "
                              "was made with, from <run_dir>/reproduce.json, else configs/pool.yaml)."),
    out: Path = typer.Option(None, help="Report folder (default: <run_dir>/report)."),
    target: str = typer.Option("match_best", help="τ calibration target: match_best | budget."),
    budget: float = typer.Option(None, help="USD per million queries, for --target budget."),
) -> None:
    """The oracle-gap report of a run's held-out predictions (e.g. a fine-tuning run), without retraining."""
    from evaluation.report.report import evaluate_run
    from evaluation.report.tables import headline, headline_markdown

    if target == "budget" and budget is None:
        fail("--target budget needs --budget USD_PER_MILLION")
    pool = pool or run_pool(run_dir)
    try:
        ev, report, deploy = evaluate_run(run_dir, labels=labels, examples=examples, pool=pool, out=out, target=target,
                                  budget_per_million=budget)
    except (DataError, UnknownNameError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    console.print(headline_markdown(headline(ev)), highlight=False, markup=False)
    for t, label in (("match_best", "best-single accuracy"), ("cost_fraction", "≤ 10% of best-single cost")):
        console.print(f"to serve for {label}: router.rule=lambda router.lam={deploy[t]['lambda']:.4g} "
                      f"(or the threshold rule at τ = {deploy[t]['tau']:.2f})", highlight=False)
    if "strategy_policy" in deploy:
        console.print(f"strategy policy (≤ 20% of best-single cost) written into {deploy['strategy_policy']}; "
                      "export the router to serve it", highlight=False)
    console.print(f"report: {report}", highlight=False)


def run_pool(run_dir: Path, default: Path = Path("configs/pool.yaml")) -> Path:
    """The pool a run was made with (its reproduce.json says), else `default`."""
    import json

    try:
        return Path(json.loads((Path(run_dir) / "reproduce.json").read_text())["pool"])
    except (OSError, ValueError, KeyError, TypeError):
        return default


def retest(
    run_dir: Path = typer.Option(Path("runs/bfcl_v1"), help="A BFCL v1 reproduce run (its labels and pool)."),
    data_config: Path = typer.Option(Path("configs/data.yaml"), help="Data config (outputs.bfcl_v1_earlier)."),
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="The model pool."),
    earlier: str = typer.Option(None, help="The earlier run's recorded outputs (default: the data config's)."),
    out_dir: Path = typer.Option(None, help="Where retest.md goes (default: <run-dir>/retest)."),
    resamples: int = typer.Option(1000, help="Bootstrap resamples."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
) -> None:
    """Test–retest: how much of the oracle is luck, from two recorded runs of the same queries."""
    import time

    from evaluation.offline.retest import run_retest

    t0 = time.perf_counter()
    try:
        _, md = run_retest(str(run_dir), data_config=str(data_config), pool_path=str(pool), earlier=earlier,
                           out_dir=str(out_dir) if out_dir else None, resamples=resamples, seed=seed)
    except (DataError, UnknownNameError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    console.print(md.read_text(encoding="utf-8"), highlight=False, markup=False)
    console.print(f"wrote {md.parent}/ in {time.perf_counter() - t0:.1f} s", highlight=False)


def readme_table(
    run_dir: Path = typer.Argument(Path("runs/default"), help="A reproduce run (its report/metrics.json)."),
    check: Path = typer.Option(None, "--check", help="A README: exit 1 naming each row of the run's table it lacks."),
) -> None:
    """The README's headline table from a run's metrics.json; with --check, whether the README still says it."""
    from evaluation.report import readme

    try:
        if check is None:
            console.print(readme.table(run_dir), highlight=False, markup=False, soft_wrap=True)
            return
        stale = readme.check(check, run_dir)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    if stale:
        fail(f"{check} does not hold {len(stale)} row(s) of {run_dir}'s table; print it with `switchcraft readme-table "
             f"{run_dir}`:\n" + "\n".join(stale))
    console.print(f"{check} holds every row of {run_dir}'s table", highlight=False)
