"""The command tree: every `switchcraft` command's --help loads, every benchmark is a `bench` subcommand, the
command modules print through `switchcraft.console` and never import `switchcraft.cli` (which imports them).

    .venv/bin/python -m pytest -q tests/switchcraft/test_cli.py
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from switchcraft.cli import app

PACKAGE = Path(__file__).resolve().parents[2] / "switchcraft"
BENCHES = {"verify", "serve", "gateway", "overhead", "soak", "mcp", "pool", "train", "long-input", "router-ab", "tools", "loop", "sessions", "mcp-recall", "console",
           "learn"}


def _commands(group, path=()):
    """Every command path of the app, groups included: ('bench',), ('bench', 'pool'), …"""
    for name, sub in sorted(getattr(group, "commands", {}).items()):
        yield (*path, name)
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_the_tree_has_every_area():
    top = {c[0] for c in COMMANDS}
    assert {"ingest", "reproduce", "evaluate", "import-outputs", "decode-report", "verify", "label", "verify-agreement",
            "train", "export", "serve", "gateway-key", "keys", "spend", "learn", "data", "bench", "pool", "tools", "retest", "mcp", "transfer", "traffic", "readme-table"} == top


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_help_loads(path):
    res = CliRunner().invoke(app, [*path, "--help"])
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.output


def test_every_benchmark_is_a_bench_subcommand():
    assert {c[1] for c in COMMANDS if c[0] == "bench" and len(c) == 2} == BENCHES
    # Each benchmark module says in its docstring which command runs it.
    bench_dir = PACKAGE.parent / "evaluation" / "bench"
    for module in bench_dir.glob("[!_]*.py"):
        doc = ast.get_docstring(ast.parse(module.read_text())) or ""
        assert f"switchcraft bench {module.stem.replace('_', '-')}" in doc, module


def test_bench_options_keep_their_names():
    out = CliRunner().invoke(app, ["bench", "tools", "--help"], terminal_width=200).output
    assert all(flag in out for flag in ("--tools", "--queries", "--run-dir", "--config", "--set", "--out", "--stages"))
    out = CliRunner().invoke(app, ["bench", "train", "--help"], terminal_width=200).output
    assert all(flag in out for flag in ("--config", "--run-dir", "--only", "--steps", "overrides"))


def test_command_modules_never_import_the_app():
    for module in PACKAGE.glob("cli_*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert "switchcraft.cli" not in names, f"{module.name}:{node.lineno} imports switchcraft.cli"


def test_fail_prints_the_message_whole_and_exits_with_the_code():
    from switchcraft.console import fail

    cli = typer.Typer()

    @cli.command()
    def broken() -> None:
        fail("models=[a, b] " + "x" * 120, code=2)

    res = CliRunner().invoke(cli, [])
    assert res.exit_code == 2
    assert f"error: models=[a, b] {'x' * 120}" in res.output  # brackets kept, one unbroken line


def test_reproduce_prints_the_first_screen(monkeypatch, tmp_path):
    """The command's wiring: the job's headline comes out as the narrow first screen, then the timings."""
    import pandas as pd

    from evaluation.jobs import reproduce as job
    from tests.headlines import METRICS

    report = tmp_path / "report" / "report.md"
    monkeypatch.setattr(job, "reproduce", lambda opts, console: job.ReproduceResult(
        report, pd.DataFrame(METRICS["headline"]), {"train": 12.0, "evaluate": 3.4}))
    res = CliRunner().invoke(app, ["reproduce", "--run-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "strategies, ≤ 20% cost" in res.output and "oracle" in res.output
    assert "category prior" not in res.output  # the rest is in report.md
    assert str(report) in res.output.replace("\n", "") and "timings (s): train 12, evaluate 3" in res.output
