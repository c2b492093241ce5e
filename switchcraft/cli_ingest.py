"""`switchcraft ingest`: read benchmark sources into one examples.parquet.

    switchcraft ingest --all --out runs/default/examples.parquet
    switchcraft ingest --source bfcl_v1 --path ../shared/data/bfcl_v1
    switchcraft ingest --list

Wiring: `register(app)` adds `ingest`.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from data.errors import DataError
from data.registry import UnknownNameError
from switchcraft.console import console, fail
from switchcraft.tables import print_by_reason


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)


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
