"""`switchcraft pool ...`: run the pool against endpoints, replay recordings over HTTP, profile costs.

switchcraft pool run --pool configs/pool.yaml --examples runs/default/examples.parquet --max-usd 20
switchcraft pool replay-server --outputs ../shared/data/bfcl_v1_pool_outputs_2024-08-11 --port 8099
switchcraft pool profile --out-dir runs/default/cost_profile
switchcraft pool sample --n 8 --seed 3 --out /tmp/pool_3.yaml
"""

from __future__ import annotations

from pathlib import Path

import typer

from switchcraft.console import console, fail

pool_app = typer.Typer(
    help="Run the model pool, replay recordings, profile costs.", no_args_is_help=True
)


def _load_examples(examples: Path | None, config: Path, data_root: str | None):
    """--examples parquet, else <out_dir>/examples.parquet, else the bfcl_v1 source of the data config."""
    from data.config import load_data_config
    from data.schema import read_examples
    from data.sources import read_source

    if examples is not None:
        return read_examples(examples)
    cfg = load_data_config(config, data_root=data_root)
    default = Path(cfg.out_dir) / "examples.parquet"
    if default.exists():
        return read_examples(default)
    return read_source("bfcl_v1", cfg.source_path("bfcl_v1"))


@pool_app.command("run")
def run(
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="Pool config."),
    examples: Path = typer.Option(
        None, help="examples.parquet (default: <out_dir>/examples.parquet or BFCL v1)."
    ),
    store: Path = typer.Option(
        Path("runs/default/pool_calls.sqlite"), help="Durable call store (resumes from it)."
    ),
    out: Path = typer.Option(
        Path("runs/default/pool_outputs.parquet"), help="Where to write the Output records."
    ),
    max_usd: float = typer.Option(
        None, "--max-usd", help="Hard budget over everything the store has paid for."
    ),
    models: str = typer.Option(None, help="Comma-separated pool model names (default: all)."),
    limit: int = typer.Option(None, help="Only the first N examples."),
    base_url: str = typer.Option(
        None, help="Send every model to this base URL (a gateway or a replay server)."
    ),
    backoff_base_s: float = typer.Option(0.5, help="First retry backoff; doubles per attempt."),
    progress: bool = typer.Option(
        None, "--progress/--no-progress", help="Progress bars (default: on a terminal)."
    ),
    config: Path = typer.Option(
        Path("configs/data.yaml"), help="Data config (for the default examples)."
    ),
    data_root: str = typer.Option(None, help="Override the data config's data_root."),
) -> None:
    """Send every example to every model; resumable (kill it and run it again), within --max-usd."""
    from data.errors import DataError
    from data.pool import load_pool
    from data.pool_runner import run_pool

    try:
        p = load_pool(pool)
        if models:
            p = p.model_copy(
                update={"models": [p.get(n.strip()) for n in models.split(",") if n.strip()]}
            )
        if base_url:
            p = p.model_copy(
                update={"models": [m.model_copy(update={"base_url": base_url}) for m in p.models]}
            )
        exs = _load_examples(examples, config, data_root)[:limit]
        summary = run_pool(
            p,
            exs,
            store,
            out=out,
            max_usd=max_usd,
            backoff_base_s=backoff_base_s,
            progress=progress,
        )
    except (DataError, KeyError) as e:
        fail(str(e).strip('"'))
    _print_summary(summary, out)
    if summary.budget_stop:
        fail(
            f"stopped cleanly: {summary.budget_stop}; run again with a larger --max-usd to continue",
            code=2,
        )
    if not summary.complete:
        fail("some calls failed (see above); run the same command again to retry them", code=1)


def _print_summary(summary, out: Path) -> None:
    from rich.table import Table

    t = Table(title=f"Pool run ({summary.seconds:.1f} s, {summary.calls_made:,} calls made)")
    for col in (
        "model",
        "examples",
        "stored before",
        "new",
        "failed",
        "not started",
        "spent now $",
    ):
        t.add_column(col, justify="left" if col == "model" else "right")
    for m in summary.models.values():
        t.add_row(
            m.model,
            f"{m.total:,}",
            f"{m.done_before:,}",
            f"{m.done_now:,}",
            f"{m.failed:,}",
            f"{m.not_started:,}",
            f"{m.spent_usd:.4f}",
        )
    console.print(t)
    if summary.resent_in_flight:
        console.print(
            f"{summary.resent_in_flight} call(s) were in flight when the last run stopped; "
            "re-sent with the same Idempotency-Key",
            highlight=False,
        )
    for m in summary.models.values():
        for e in m.errors:
            console.print(f"[red]{m.model}[/]: {e}", highlight=False)
    console.print(f"wrote {out} and {out.with_suffix('.json')} (the run record)", highlight=False)


@pool_app.command("replay-server")
def replay_server(
    outputs: Path = typer.Option(
        None, help="A benchmark's recordings folder or an outputs.parquet (default: the recordings of --pool's "
        "benchmark, else BFCL v1's)."
    ),
    examples: Path = typer.Option(
        None, help="examples.parquet (default: the questions of the recordings' own benchmark)."
    ),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback unless you mean it)."),
    port: int = typer.Option(8099),
    pool: Path = typer.Option(
        None, help="Pool config: serve only its models, and accept their model ids."
    ),
    fault_429: float = typer.Option(0.0, help="Share of requests answered 429 with Retry-After."),
    fault_500: float = typer.Option(0.0, help="Share of requests answered 500."),
    fault_slow: float = typer.Option(0.0, help="Share of answers delayed by --slow-s."),
    fault_drop: float = typer.Option(
        0.0, help="Share of answers whose connection is dropped mid-body."
    ),
    slow_s: float = typer.Option(2.0),
    retry_after_s: float = typer.Option(1.0),
    latency_s: float = typer.Option(0.0, help="Added to every answer."),
    seed: int = typer.Option(0),
    config: Path = typer.Option(Path("configs/data.yaml")),
    data_root: str = typer.Option(None),
) -> None:
    """Serve /v1/chat/completions from recorded outputs (an OpenAI-compatible stand-in for the pool)."""
    from data.config import load_data_config
    from data.errors import DataError
    from data.pool import load_pool
    from data.replay import Faults
    from data.replay.serve import build_state, serve
    from data.schema import read_examples

    try:
        cfg = load_data_config(config, data_root=data_root)
        served = load_pool(pool) if pool else None
        bench = _benchmark_of(outputs, served)
        outputs = outputs or Path(bench.recordings_path(cfg))
        faults = Faults(
            rate_429=fault_429,
            rate_500=fault_500,
            rate_slow=fault_slow,
            rate_drop=fault_drop,
            slow_s=slow_s,
            retry_after_s=retry_after_s,
            latency_s=latency_s,
            seed=seed,
        )
        questions = read_examples(examples) if examples is not None else bench.examples(cfg)
        state = build_state(outputs, questions, pool=served, faults=faults)
    except DataError as e:
        fail(str(e))
    typer.echo(f"replaying {len(state.recordings)} model(s) from {outputs} ({bench.name}: "
               f"{len(questions):,} questions) on http://{host}:{port}/v1")
    serve(state, host=host, port=port)


def _benchmark_of(outputs: Path | None, pool):
    """The benchmark whose questions the recordings answer: the one their folder holds, else the pool's, else
    BFCL v1. A parquet of outputs names no benchmark: its ids' prefix does (`bfcl_v3:…`)."""
    from data.benchmarks import find, get, names

    if outputs is not None and outputs.is_dir():
        found = find(outputs)
        if found is not None:
            return found
    if outputs is not None and outputs.suffix == ".parquet" and outputs.is_file():
        import pyarrow.parquet as pq

        ids = pq.read_table(outputs, columns=["example_id"]).column(0).slice(0, 1).to_pylist()
        prefix = ids[0].split(":", 1)[0] if ids else ""
        if prefix in names():
            return get(prefix)
    return get(pool.benchmark if pool is not None else "bfcl_v1")

@pool_app.command("profile")
def profile(
    recordings: Path = typer.Option(
        None, help="BFCL result directory or outputs.parquet (default: BFCL v1's)."
    ),
    prices: Path = typer.Option(None, help="Price table JSON (default: BFCL v1's 2024 prices)."),
    out_dir: Path = typer.Option(
        Path("runs/default/cost_profile"), help="Where the table and plot go."
    ),
    config: Path = typer.Option(Path("configs/data.yaml")),
    data_root: str = typer.Option(None),
) -> None:
    """Per model: list price vs real mean cost per query, output tokens per call, reasoning share."""
    from data.config import load_data_config
    from data.replay.cost_profile import profile_costs, read_usages, write_profile
    from data.errors import DataError
    from data.pool import load_price_table
    try:
        cfg = load_data_config(config, data_root=data_root)
        table = load_price_table(prices or cfg.output_path("prices"))
        src = Path(recordings or cfg.output_path("bfcl_v1"))
        recorded = {p.name for p in src.iterdir() if p.is_dir()} if src.is_dir() else None
        wanted = [m for m in table if recorded is None or m in recorded]
        rows, ref = profile_costs(
            read_usages(src, models=wanted if recorded is not None else None), table
        )
    except (DataError, ValueError) as e:
        fail(str(e))
    paths = write_profile(rows, ref, out_dir)
    missing = [r.model for r in rows if not r.queries]
    typer.echo(paths["md"].read_text())  # plain: a markdown table must not be re-wrapped
    if missing:
        console.print(
            f"priced but not recorded (no real cost): {', '.join(missing)}", highlight=False
        )
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)


@pool_app.command("sample")
def sample(
    out: Path = typer.Option(..., help="The pool file to write (YAML)."),
    n: int = typer.Option(8, help="Models in the pool."),
    seed: int = typer.Option(0, help="Which draw."),
    open_weight: int = typer.Option(None, help="How many of them open-weight (default: as drawn)."),
    recordings: Path = typer.Option(None, help="BFCL result directory (default: BFCL v1's)."),
    prices: Path = typer.Option(None, help="Price table JSON (default: BFCL v1's 2024 prices)."),
    from_pool: Path = typer.Option(None, "--from", help="Draw from this pool file's models instead (e.g. "
                                   "configs/pools/bfcl_v3_2025.yaml), each priced and served as it says."),
    config: Path = typer.Option(Path("configs/data.yaml")),
    data_root: str = typer.Option(None),
) -> None:
    """Draw a pool of recorded models (API and open-weight), priced and styled as they were recorded."""
    import yaml

    from data.config import load_data_config
    from data.errors import DataError
    from data.pool.sample import sample_from_pool, sample_pool
    if from_pool is not None and (open_weight is not None or recordings or prices):
        fail("--from draws from a pool file's priced models: --open-weight, --recordings and --prices do not apply")
    try:
        if from_pool is not None:
            pool, skipped = sample_from_pool(from_pool, n=n, seed=seed), {}
        else:
            cfg = load_data_config(config, data_root=data_root)
            pool, skipped = sample_pool(recordings or cfg.output_path("bfcl_v1"), prices or cfg.output_path("prices"),
                                        n=n, seed=seed, open_weight=open_weight)
    except DataError as e:
        fail(str(e))
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Drawn by: switchcraft pool sample --n {n} --seed {seed}"
              + (f" --from {from_pool}" if from_pool is not None else "")
              + (f" --open-weight {open_weight}" if open_weight is not None else "")
              + f"\n# Run: switchcraft reproduce --pool {out} --run-dir runs/pool_{seed}\n")
    out.write_text(header + yaml.safe_dump(pool, sort_keys=False))
    for why, names in skipped.items():
        if names:
            console.print(f"skipped {len(names)} recorded models ({why}): {', '.join(names)}", highlight=False)
    console.print(f"wrote {out}: " + ", ".join(f"{m['name']} ({m.get('prompt_style', 'native')})" for m in pool["models"]),
                  highlight=False)


def register(app: typer.Typer) -> None:
    """Add `switchcraft pool ...` to the app."""
    app.add_typer(pool_app, name="pool")
