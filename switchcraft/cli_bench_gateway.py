"""`switchcraft bench gateway`: the whole stack on loopback under load, optionally with an endpoint killed.

    switchcraft bench gateway --router runs/default/router_onnx -n 400 -c 16
    switchcraft bench gateway --router runs/default/router_onnx -n 400 -c 16 --kill api.openai.com --kill-at 100 --kill-for 10
    switchcraft bench gateway --router runs/default/router_onnx -n 400 -c 16 --kill all --kill-at 100 --kill-for 10

Wiring: `register_bench(bench_app)` adds `gateway` to the `bench` group.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console

console, err = Console(), Console(stderr=True)
DATA_ROOT = Path(os.environ.get("SWITCHCRAFT_DATA_ROOT", "../shared/data"))


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("gateway", help="Load-test the gateway stack on loopback (replay upstreams); optionally kill an "
                                      "endpoint at request K for S seconds.")(bench_gateway)


def bench_gateway(
    router: Path = typer.Option(Path("runs/default/router_onnx"), "--router", help="An exported router (switchcraft "
                                "export), or with --triton its model repository."),
    n: int = typer.Option(400, "--requests", "-n", help="Requests to send (BFCL v1 queries, cycled)."),
    concurrency: int = typer.Option(16, "--concurrency", "-c", help="Requests in flight at once."),
    kill: list[str] = typer.Option([], "--kill", help="Take down the endpoints whose base_url contains this "
                                   "(repeatable; 'all': every endpoint)."),
    kill_at: int = typer.Option(100, help="The request number at which they go down."),
    kill_for: float = typer.Option(10.0, help="Seconds they stay down."),
    max_seconds: float = typer.Option(300.0, help="No request is started after this many seconds."),
    triton: bool = typer.Option(False, help="Serve the router from a local tritonserver (--router: a model repository)."),
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="The pool (each endpoint gets a replay server)."),
    data_root: Path = typer.Option(DATA_ROOT, help="Shared data root (bfcl_v1/ and the recorded outputs)."),
    out: Path = typer.Option(Path("runs/bench_gateway.md"), "--out", "-o", help="Markdown table (+ .json)."),
    processes: int = typer.Option(1, "--processes", help="Gateway processes (requests round-robin across them)."),
    state: str = typer.Option("memory", "--state", help="Where limits and the ledger live: memory | sqlite | redis "
                              "(a real redis-server started for the run)."),
    overrides: list[str] = typer.Argument(None, help="Gateway config overrides key=value (e.g. upstream.timeout_s=1)."),
) -> None:
    from serving.gateway.bench import GatewayBenchConfig, run_gateway_bench, to_markdown, write_results

    try:
        cfg = GatewayBenchConfig(router_dir=router, data_root=data_root, pool=pool, requests=n, concurrency=concurrency,
                                 kill=list(kill), kill_at=kill_at, kill_for_s=kill_for, max_seconds=max_seconds,
                                 overrides=list(overrides or []), triton=triton, processes=processes, state=state)
        if not (router / "router.json").exists():
            raise FileNotFoundError(f"{router}: no router.json; export one first: switchcraft export ROUTER --out {router}")
        result = run_gateway_bench(cfg)
    except (FileNotFoundError, ValueError, RuntimeError, TimeoutError) as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False)
        raise typer.Exit(1) from None
    write_results(result, out)
    console.print(to_markdown(result), highlight=False, markup=False, soft_wrap=True)
    console.print(f"wrote {out} and {out.with_suffix('.json')}", highlight=False)
