"""The `switchcraft` command: the typer app and the registration of every command module.

    switchcraft --help
    switchcraft COMMAND --help

Each `cli_*.py` holds one area's commands, thin wrappers over the stage packages' functions, with
`register(app)` (and `cli_bench.register_bench(bench_app)` for the benchmarks). They print through
`switchcraft.console` and never import this module, which imports them.
"""

from __future__ import annotations

import sys

import typer

from switchcraft import (
    cli_bench,
    cli_fetch,
    cli_ingest,
    cli_keys,
    cli_learn,
    cli_mcp,
    cli_outputs,
    cli_pool,
    cli_reproduce,
    cli_serve,
    cli_state,
    cli_tools,
    cli_traffic,
    cli_train,
    cli_transfer,
    cli_verify,
)

app = typer.Typer(help="switchcraft: tool-calling router.", no_args_is_help=True, pretty_exceptions_enable=False)
data_app = typer.Typer(help="Fetch the public data sets.", no_args_is_help=True)
app.add_typer(data_app, name="data")
bench_app = typer.Typer(help="Benchmarks that write a table (figures in the README's Performance section).",
                        no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# The order here is the order `switchcraft --help` lists the commands in.
for _module in (cli_ingest, cli_reproduce, cli_outputs, cli_verify, cli_pool, cli_train, cli_serve, cli_keys, cli_state,
                cli_learn, cli_traffic, cli_tools, cli_mcp, cli_fetch, cli_transfer):
    _module.register(app)
cli_bench.register_bench(bench_app)


def main() -> None:  # pragma: no cover
    app(prog_name="switchcraft")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
