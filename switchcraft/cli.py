"""The `switchcraft` command: thin wrappers over the stage packages' functions."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from data.errors import DataError
from data.registry import UnknownNameError
from switchcraft.tables import print_by_reason

app = typer.Typer(help="switchcraft: tool-calling router.", no_args_is_help=True, pretty_exceptions_enable=False)
data_app = typer.Typer(help="Fetch the public data sets.", no_args_is_help=True)
app.add_typer(data_app, name="data")
bench_app = typer.Typer(help="Benchmarks that write a table (figures in the README's Performance section).",
                        no_args_is_help=True)
app.add_typer(bench_app, name="bench")

console = Console(stderr=False)
err = Console(stderr=True)


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


@app.command()
def ingest(
    source: str = typer.Option(None, "--source", "-s", help="One source to ingest (see --list)."),
    path: str = typer.Option(None, "--path", "-p", help="Where that source's files are (or a hub id)."),
    all_: bool = typer.Option(False, "--all", help="Ingest every source enabled in the config."),
    config: Path = typer.Option(Path("configs/data.yaml"), help="Data config."),
    data_root: str = typer.Option(None, help="Override the config's data_root ($SWITCHCRAFT_DATA_ROOT)."),
    out: Path = typer.Option(None, help="Output parquet (default: <out_dir>/examples.parquet)."),
    option: list[str] = typer.Option([], "--option", "-o", help="Adapter option key=value (e.g. questions=FILE)."),
    list_: bool = typer.Option(False, "--list", help="List the known sources and exit."),
) -> None:
    """Read benchmark sources into one examples.parquet, with counts per source and category."""
    from data.config import load_data_config
    from data.ingest import ingest as run_ingest
    from data.sources import load_adapters

    if list_:
        for name in load_adapters().names():
            console.print(name)
        return
    if bool(source) == all_:
        fail("give exactly one of --source NAME or --all")
    if path and not source:
        fail("--path needs --source")
    opts = {}
    for kv in option:
        if "=" not in kv:
            fail(f"--option {kv!r}: expected key=value")
        k, v = kv.split("=", 1)
        opts[k] = v
    try:
        cfg = load_data_config(config, data_root=data_root)
        out = out or Path(cfg.out_dir) / "examples.parquet"
        result = run_ingest(
            cfg,
            [source] if source else None,
            out=out,
            path_overrides={source: path} if source and path else None,
            options={source: opts} if source else None,
        )
    except (DataError, UnknownNameError) as e:
        fail(str(e))
    _print_ingest(result)


def _print_ingest(result) -> None:
    rep = result.report
    table = Table(title="Examples ingested")
    table.add_column("source")
    table.add_column("category")
    table.add_column("examples", justify="right")
    for (src, cat), n in sorted(rep.counts.items()):
        table.add_row(src, cat, f"{n:,}")
    for src in sorted({s for s, _ in rep.counts}):
        table.add_row(f"[bold]{src}[/]", "[bold]all[/]", f"[bold]{rep.total(src):,}[/]")
    table.add_row("[bold]total[/]", "", f"[bold]{rep.total():,}[/]")
    console.print(table)
    print_by_reason(console, "Rows skipped, by reason", "source", rep.skipped)
    for note in rep.notes:
        console.print(f"note: {note}", highlight=False)
    for src, why in result.unavailable.items():
        console.print(f"[yellow]not ingested[/] {src}: {why}", highlight=False)
    console.print(f"wrote {result.path} ({rep.total():,} examples) in {result.seconds:.1f} s", highlight=False)


@app.command()
def reproduce(
    run_dir: Path = typer.Option(Path("runs/default"), help="Where everything is written."),
    train_config: Path = typer.Option(Path("configs/train.yaml"), help="Training config."),
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="The model pool."),
    data_config: Path = typer.Option(Path("configs/data.yaml"), help="Data config."),
    max_examples: int = typer.Option(None, help="Use a slice of the queries (smoke runs)."),
    folds: int = typer.Option(None, help="Number of folds (default: the training config's)."),
    target: str = typer.Option("match_best", help="τ calibration target: match_best | budget."),
    budget: float = typer.Option(None, help="USD per million queries, for --target budget."),
    knn: bool = typer.Option(True, help="Include the kNN baseline (embeds every query once more)."),
    labels: str = typer.Option("truth", "--labels", help="truth | consensus: also fit everything on consensus labels "
                               "(no expected answers) and score it with the true ones (report: 'Without ground truth')."),
    override: list[str] = typer.Argument(None, help="Training config overrides key=value (e.g. mode=finetune)."),
) -> None:
    """The main job: ingest → import recordings → label → train (k-fold) → evaluate → report."""
    from evaluation.reproduce import ReproduceOptions
    from evaluation.reproduce import reproduce as run_reproduce
    from evaluation.report import headline_markdown

    if target == "budget" and budget is None:
        fail("--target budget needs --budget USD_PER_MILLION")
    if labels not in ("truth", "consensus"):
        fail(f"--labels {labels!r}: expected truth or consensus")
    opts = ReproduceOptions(run_dir=run_dir, data_config=data_config, pool=pool, train_config=train_config,
                            train_overrides=list(override or []), max_examples=max_examples, folds=folds,
                            target=target, budget_per_million=budget, knn=knn, labels=labels)
    try:
        result = run_reproduce(opts, console)
    except (DataError, UnknownNameError) as e:
        fail(str(e))
    console.rule("[bold]headline (held-out)")
    console.print(headline_markdown(result.headline), highlight=False, markup=False)
    console.print(f"report: {result.report}", highlight=False)
    console.print("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in result.timings.items()), highlight=False)


@app.command()
def evaluate(
    run_dir: Path = typer.Argument(..., help="A training run: its oof_predictions.parquet is evaluated."),
    labels: Path = typer.Option(None, help="labels.parquet (default: <run_dir>/labels.parquet, else runs/default's)."),
    examples: Path = typer.Option(None, help="examples.parquet (default: beside the labels)."),
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="The model pool (its order names the columns)."),
    out: Path = typer.Option(None, help="Report folder (default: <run_dir>/report)."),
    target: str = typer.Option("match_best", help="τ calibration target: match_best | budget."),
    budget: float = typer.Option(None, help="USD per million queries, for --target budget."),
) -> None:
    """The oracle-gap report of a run's held-out predictions (e.g. a fine-tuning run), without retraining."""
    from evaluation.report import evaluate_run, headline, headline_markdown

    if target == "budget" and budget is None:
        fail("--target budget needs --budget USD_PER_MILLION")
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


# Commands of other areas live in their own modules, each with register(app).
from switchcraft import (  # noqa: E402
    cli_bench_gateway,
    cli_fetch,
    cli_learn,
    cli_outputs,
    cli_pool,
    cli_serve,
    cli_state,
    cli_tools,
    cli_train,
    cli_verify,
)

for _module in (cli_outputs, cli_verify, cli_pool, cli_train, cli_serve, cli_state, cli_learn, cli_tools, cli_fetch):
    _module.register(app)
for _module in (cli_verify, cli_serve, cli_bench_gateway):
    _module.register_bench(bench_app)


def main() -> None:  # pragma: no cover
    app(prog_name="switchcraft")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
