"""`switchcraft import-outputs` and `switchcraft decode-report`: recorded model outputs.

    switchcraft import-outputs                      # BFCL v1 + v4 recorded outputs -> runs/default/outputs.parquet
    switchcraft import-outputs --source bfcl_v1 --models gpt-4o-2024-05-13,claude-3-5-sonnet-20240620
    switchcraft import-outputs --source bfcl_v3 --examples runs/v3/examples.parquet --out runs/v3/outputs.parquet
    switchcraft decode-report --out runs/default/decode_report
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from switchcraft.console import console, err, fail


def import_outputs(
    source: str = typer.Option("all", "--source", "-s", help="A benchmark with recordings (a module of data/benchmarks/; "
                               "a wrong name lists them), or all: those not imported by name only."),
    path: str = typer.Option(None, "--path", "-p", help="Folder of result files (default: the benchmark's recordings)."),
    examples: Path = typer.Option(None, help="examples.parquet, for the tools in scope (default: <out_dir>/examples.parquet)."),
    out: Path = typer.Option(None, help="Output parquet (default: <out_dir>/outputs.parquet)."),
    models: str = typer.Option(None, help="Comma-separated model folder names to keep."),
    config: Path = typer.Option(Path("configs/data.yaml"), help="Data config."),
    data_root: str = typer.Option(None, help="Override the config's data_root ($SWITCHCRAFT_DATA_ROOT)."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Import recorded outputs, decode them, and write outputs.parquet; print counts and decode rates."""
    from data.benchmarks import get, names
    from data.config import load_data_config
    from data.errors import DataError
    from data.recorded import ImportReport, import_recorded
    from data.schema import read_examples, write_outputs

    if source not in (*names(), "all"):
        fail(f"--source {source!r}: choose one of {', '.join(names())}, all")
    if path and source == "all":
        fail(f"--path needs one --source ({', '.join(names())})")
    in_all = [n for n in names() if get(n).in_all]  # what --source all imports; the others by name only
    try:
        cfg = load_data_config(config, data_root=data_root)
        out = out or Path(cfg.out_dir) / "outputs.parquet"
        examples = examples or Path(cfg.out_dir) / "examples.parquet"
        by_id = None
        if examples.exists():
            by_id = {e.id: e for e in read_examples(examples)}
        elif source == "all" or get(source).in_all:
            err.print(
                f"[yellow]note:[/] {examples} not found: decoding without the tools in scope "
                "(rewritten names are not mapped back; run `switchcraft ingest --all` first)",
                highlight=False,
            )
        wanted = [m.strip() for m in models.split(",") if m.strip()] if models else None
        outputs, report = [], ImportReport()
        for src in in_all if source == "all" else (source,):
            bench = get(src)
            where = path or bench.recordings_path(cfg)
            if not where or not Path(where).exists():
                if source == "all":
                    err.print(f"[yellow]skipped[/] {src}: no folder at {where}", highlight=False)
                    continue
                fail(f"{src}: no folder of outputs at {where}")
            keep = wanted
            if wanted and source == "all":  # with --source all, a model may live in either source
                from data.recorded import result_files

                present = {m for m, _, _ in result_files(where, "auto")}
                keep = [m for m in wanted if m in present]
                if not keep:
                    continue
            src_examples = by_id
            if not bench.in_all and not any(k.startswith(src + ":") for k in by_id or {}):
                src_examples = _source_examples(cfg, bench)  # the questions these outputs answer, from the config
            elif by_id is not None and not any(k.startswith(src + ":") for k in by_id):
                err.print(
                    f"[yellow]note:[/] {examples} has no {src} examples: decoding {src} without the tools in scope "
                    f"(run `switchcraft ingest --source {bench.source}` to map names back)",
                    highlight=False,
                )
                src_examples = None
            outputs += import_recorded(where, layout=src, examples=src_examples, models=keep, report=report, progress=progress)
        t = time.perf_counter()
        write_outputs(out, outputs)
        write_s = time.perf_counter() - t
    except DataError as e:
        fail(str(e))
    _print_import(report)
    console.print(
        f"wrote {out} ({report.total():,} outputs; imported in {report.seconds:.1f} s, written in {write_s:.1f} s)",
        highlight=False,
    )


def _source_examples(cfg, bench) -> dict:
    """The examples of a benchmark imported by name only, read by its source from the data config's
    `sources.<source>` (seconds)."""
    where = cfg.source_path(bench.source)
    if not where or not Path(where).exists():
        fail(f"{bench.name}: its questions are needed to decode its outputs, and sources.{bench.source} in the data "
             f"config is {where}")
    err.print(f"[yellow]note:[/] decoding {bench.name} with the tools of its questions, read from {where}", highlight=False)
    return {e.id: e for e in bench.examples(cfg)}


def _print_import(report) -> None:
    table = Table(title="Recorded outputs imported")
    errors = bool(report.no_answer)  # inference errors: a column of their own when there are any
    cols = (("model", "left"), ("outputs", "right"), ("decoded", "right"), ("decode rate", "right"))
    for col, justify in cols + ((("no answer", "right"),) if errors else ()):
        table.add_column(col, justify=justify)
    for model in sorted(report.outputs):
        n, d = report.outputs[model], report.decoded[model]
        table.add_row(model, f"{n:,}", f"{d:,}", f"{d / n:.1%}", *([f"{report.no_answer[model]:,}"] if errors else []))
    table.add_row("[bold]total[/]", f"[bold]{report.total():,}[/]", f"[bold]{sum(report.decoded.values()):,}[/]",
                  f"[bold]{report.decode_rate():.1%}[/]",
                  *([f"[bold]{sum(report.no_answer.values()):,}[/]"] if errors else []))
    console.print(table)
    from switchcraft.tables import print_by_reason

    print_by_reason(console, "Rows not imported, by reason", "model", report.skipped)


def decode_report(
    out: Path = typer.Option(None, help="Folder for decode_report.md and the CSVs (default: <out_dir>/decode_report)."),
    path: str = typer.Option(None, "--path", "-p", help="BFCL v1 outputs folder (default: configs/data.yaml outputs.bfcl_v1)."),
    config: Path = typer.Option(Path("configs/data.yaml"), help="Data config."),
    data_root: str = typer.Option(None, help="Override the config's data_root ($SWITCHCRAFT_DATA_ROOT)."),
) -> None:
    """Decode all BFCL v1 recorded outputs (71 models) and report the decode rate by format and model."""
    from data.config import load_data_config
    from data.decoders.report import DecodeReport
    from data.errors import DataError
    from data.recorded import import_recorded
    from data.sources import read_source

    try:
        cfg = load_data_config(config, data_root=data_root)
        where = path or cfg.output_path("bfcl_v1")
        questions = cfg.source_path("bfcl_v1")
        # The questions give each output its tools in scope, so names map back as in the import.
        examples = {e.id: e for e in read_source("bfcl_v1", questions)} if questions and Path(questions).exists() else None
        t = time.perf_counter()
        outputs = import_recorded(where, layout="bfcl_v1", examples=examples, progress=True)
        report = DecodeReport.of(outputs, seconds=time.perf_counter() - t)
        files = report.write(out or Path(cfg.out_dir) / "decode_report")
    except DataError as e:
        fail(str(e))
    console.print(report.to_markdown(), highlight=False, markup=False)
    console.print("wrote " + ", ".join(str(f) for f in files), highlight=False)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("import-outputs")(import_outputs)
    app.command("decode-report")(decode_report)
