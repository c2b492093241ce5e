"""`switchcraft bench …`: every benchmark, each a thin wrapper over its module in `evaluation/bench/`.

    switchcraft bench verify [--repeat 3]
    switchcraft bench pool [--concurrency 8 --concurrency 64] [--calls 1630]
    switchcraft bench train [--only frozen,finetune,distilbert,add_model] [--steps 40]
    switchcraft bench serve --onnx runs/default/router_onnx --router runs/default/router
    # gateway, overhead, soak and loop replay BFCL v1's recordings: the 2024 pool's router, made by
    #   make reproduce-2024 && switchcraft export runs/bfcl_v1/router --out runs/bfcl_v1/router_onnx --int8
    switchcraft bench long-input --router runs/default/router_onnx
    switchcraft bench router-ab ROUTER_ONNX_A ROUTER_ONNX_B [--n 300]
    switchcraft bench tools [--set retrieval.max_intents=1] [--out bench_fast.json] [--stages 0.3]
    switchcraft bench gateway --router runs/bfcl_v1/router_onnx -n 400 -c 16 [--kill api.openai.com]
    switchcraft bench gateway --fleet -n 300 -c 16 [--shapes 1x1,1x2,1x4,2x1] [--log sqlite,postgres]
    switchcraft bench overhead --router runs/bfcl_v1/router_onnx [--concurrency 1 --concurrency 16 --concurrency 64]
    switchcraft bench soak --router runs/bfcl_v1/router_onnx --minutes 10
    switchcraft bench loop --requests 200 --score 200 --add-model llama-3-70b-instruct --out runs/loop
    switchcraft bench mcp [--servers 10 --tools 1000 --requests 500]
    switchcraft bench console [--requests 1000000] [--days 30] [--out runs/bench_console.md] [--screenshots DIR]
    switchcraft bench sessions --router runs/v3/router --pool configs/pools/bfcl_v3_2025.yaml --threshold 0.9
    switchcraft bench learn --requests 100000 [--explore 0.05] [--out runs/bench_learn.md] [--whole-read]

Wiring: `register_bench(bench_app)` adds them to the `bench` group.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from switchcraft.console import console, fail

DATA_ROOT = Path(os.environ.get("SWITCHCRAFT_DATA_ROOT", "../shared/data"))
SET_HELP = "Override a config value, e.g. retrieval.max_intents=1 (repeatable)."


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("verify")(bench_verify)
    bench_app.command("serve", help="Routing latency P50/P99 and throughput: PyTorch, ORT fp32/INT8, Triton HTTP/gRPC.")(
        bench_serve)
    bench_app.command("gateway", help="Load-test the gateway stack on loopback (replay upstreams); optionally kill an "
                                      "endpoint at request K for S seconds; --fleet: req/s and added P50/P99 of "
                                      "1, 2, 4 workers and two replicas, named and routed, log on SQLite and "
                                      "PostgreSQL.")(bench_gateway)
    bench_app.command("overhead", help="What the gateway adds: the same replay upstream called directly and through "
                                       "the gateway (routing off and on), per concurrency and state store.")(
        bench_overhead)
    bench_app.command("soak", help="Mixed and hostile traffic, reloads and a Redis restart for N minutes: RSS over "
                                   "time, 5xx, lost requests, ledger against what the upstreams billed.")(bench_soak)
    bench_app.command("pool")(bench_pool)
    bench_app.command("train")(bench_train)
    bench_app.command("long-input")(bench_long_input)
    bench_app.command("router-ab")(bench_router_ab)
    bench_app.command("tools")(bench_tools)
    bench_app.command("loop")(bench_loop)
    bench_app.command("mcp")(bench_mcp)
    bench_app.command("mcp-recall")(bench_mcp_recall)
    bench_app.command("sessions")(bench_sessions)
    bench_app.command("console")(bench_console)
    bench_app.command("learn")(bench_learn)


def bench_verify(
    repeat: int = typer.Option(1, help="Runs of decode+verify; the best is reported."),
    data_root: str = typer.Option(
        None, help="Shared data folder (default: ../shared/data or $SWITCHCRAFT_DATA_ROOT)."
    ),
) -> None:
    """Time decoding + verifying all 115,730 recorded BFCL v1 outputs."""
    from evaluation.bench.verify import bench_verify as run

    r = run(data_root or DATA_ROOT, repeat)
    console.print(f"outputs:            {r['outputs']:,} ({r['correct']:,} correct)\n"
                  f"load + prepare:     {r['load_examples_s']:.2f} s (1,630 examples, once)\n"
                  f"read JSON lines:    {r['read_rows_s']:.2f} s\n"
                  f"decode + verify:    {r['cold_s']:.2f} s wall, {r['cold_cpu_s']:.2f} s CPU (first run, cold caches)\n"
                  f"  best of {repeat}:        {r['decode_verify_s']:.2f} s wall, {r['decode_verify_cpu_s']:.2f} s CPU "
                  f"({r['outputs_per_s']:,.0f} outputs/s; target <= 10 s)\n"
                  f"load average:       {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time is only clean "
                  "near 1)", highlight=False, markup=False, soft_wrap=True)


def bench_serve(
    onnx_dir: Path = typer.Option(..., "--onnx", help="Exported router (switchcraft export --int8)."),
    router_dir: Path = typer.Option(None, "--router", help="The PyTorch router: adds the eager row and the levers."),
    out: Path = typer.Option(Path("runs/default/bench_serve.md"), "--out", "-o", help="Markdown table (+ .json)."),
    n: int = typer.Option(200, "--requests", "-n", help="BFCL v1 requests timed per row."),
    throughput_requests: int = typer.Option(256, help="Requests per throughput measurement."),
    threads: int = typer.Option(None, help="Threads for ORT and PyTorch (default: all cores)."),
    triton: bool = typer.Option(True, help="Start a local tritonserver for the Triton rows."),
    batched: bool = typer.Option(True, help="Also sweep concurrency through the gateway's routing micro-batcher."),
    levers: bool = typer.Option(True, help="Measure each lever alone."),
    data_root: Path = typer.Option(DATA_ROOT, help="Shared data root holding bfcl_v1/."),
    note: list[str] = typer.Option([], help="A note for the table (e.g. 'machine busy')."),
) -> None:
    from evaluation.bench.serve import BenchConfig, run_bench, to_markdown, write_results

    cfg = BenchConfig(onnx_dir=onnx_dir, router_dir=router_dir, n_requests=n, threads=threads, triton=triton,
                      batched=batched, throughput_requests=throughput_requests, levers=levers, data_root=data_root,
                      notes=list(note))
    try:
        result = run_bench(cfg)
    except (FileNotFoundError, ValueError, RuntimeError, TimeoutError) as e:
        fail(str(e))
    write_results(result, out, cfg.concurrency)
    console.print(to_markdown(result, cfg.concurrency), highlight=False)
    console.print(f"wrote {out} and {out.with_suffix('.json')}", highlight=False)


FLEET_OUT = "runs/bench_gateway_fleet/fleet.md"


def bench_gateway(
    router: Path = typer.Option(Path("runs/bfcl_v1/router_onnx"), "--router", help="An exported router (switchcraft "
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
    out: Path = typer.Option(None, "--out", "-o", help="Markdown table (+ .json) [default: runs/bench_gateway.md; "
                             f"--fleet: {FLEET_OUT}]."),
    processes: int = typer.Option(1, "--processes", help="Gateway processes (requests round-robin across them)."),
    workers: int = typer.Option(1, "--workers", help="Worker processes of each gateway on its one port (switchcraft "
                                "serve --workers N; needs --state sqlite or redis)."),
    state: str = typer.Option("memory", "--state", help="Where limits and the ledger live: memory | sqlite | redis "
                              "(a real redis-server started for the run)."),
    log: str = typer.Option(None, "--log", help="The gateways' decision log: none | sqlite | postgres (a PostgreSQL "
                            "started for the run) [default: none; --fleet: a comma list, default sqlite,postgres]."),
    fleet: bool = typer.Option(False, "--fleet", help="Instead of one load test, each --shapes × --log × named and "
                               "routed, against the upstream called directly (state in Redis); -n per row."),
    shapes: str = typer.Option("1x1,1x2,1x4,2x1", "--shapes", help="With --fleet: RxW = R replicas (gateway "
                               "processes, requests spread round-robin) of W workers each, comma-separated."),
    overrides: list[str] = typer.Argument(None, help="Gateway config overrides key=value (e.g. upstream.timeout_s=1)."),
) -> None:
    from evaluation.bench.gateway import GatewayBenchConfig, run_gateway_bench, to_markdown, write_results

    if fleet:
        if kill or triton or processes != 1 or workers != 1 or state != "memory":
            fail("--fleet sets the processes, workers and state of each row (--shapes; state: Redis): --kill, "
                 "--triton, --processes, --workers and --state are for a single run")
        return _bench_fleet(router, data_root, pool, n, concurrency, shapes, log or "sqlite,postgres",
                            out or Path(FLEET_OUT), list(overrides or []))
    out = out or Path("runs/bench_gateway.md")
    try:
        cfg = GatewayBenchConfig(router_dir=router, data_root=data_root, pool=pool, requests=n, concurrency=concurrency,
                                 kill=list(kill), kill_at=kill_at, kill_for_s=kill_for, max_seconds=max_seconds,
                                 overrides=list(overrides or []), triton=triton, processes=processes, state=state,
                                 workers=workers, log=log or "none")
        _check_router(router)
        result = run_gateway_bench(cfg)
    except (FileNotFoundError, ValueError, RuntimeError, TimeoutError) as e:
        fail(str(e))
    write_results(result, out)
    console.print(to_markdown(result), highlight=False, markup=False, soft_wrap=True)
    console.print(f"wrote {out} and {out.with_suffix('.json')}", highlight=False)


def _check_router(router: Path) -> None:
    if not (router / "router.json").exists():
        raise FileNotFoundError(f"{router}: no router.json; export one first: switchcraft export ROUTER --out {router}")


def _bench_fleet(router: Path, data_root: Path, pool: Path, n: int, concurrency: int, shapes: str, logs: str,
                 out: Path, overrides: list[str]) -> None:
    """`bench gateway --fleet`: a progress bar while it runs, then the table in the terminal and in `out`."""
    from rich import box
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from evaluation.bench._fleet import ALIGN, HEAD, FleetConfig, parse_shapes, run_fleet, table_rows, title, write_results

    try:
        cfg = FleetConfig(router_dir=router, data_root=data_root, pool=pool, requests=n, concurrency=concurrency,
                          shapes=parse_shapes(shapes), logs=[x.strip() for x in logs.split(",") if x.strip()],
                          overrides=overrides)
        _check_router(router)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("starting", total=None)
            result = run_fleet(cfg, progress=lambda what, done, total: bar.update(task, description=what,
                                                                                  completed=done, total=total))
    except (FileNotFoundError, ValueError, RuntimeError, TimeoutError) as e:
        fail(str(e))
    write_results(result, out)
    console.print(title(result), highlight=False, markup=False, soft_wrap=True)
    table = Table(box=box.SIMPLE_HEAD)
    for name, a in zip(HEAD, ALIGN):
        table.add_column(name, justify="right" if a == "r" else "left", no_wrap=True)
    for row in table_rows(result):
        table.add_row(*row)
    # its whole width, in a narrow terminal or a file too (rich lays a file out 80 columns wide)
    Console(file=console.file, width=max(console.width, 150)).print(table)
    console.print(f"wrote {out} and {out.with_suffix('.json')}", highlight=False, soft_wrap=True)


def bench_overhead(
    router: Path = typer.Option(Path("runs/bfcl_v1/router_onnx"), "--router", help="An exported router (switchcraft "
                                "export)."),
    concurrency: list[int] = typer.Option([1, 16, 64], "--concurrency", "-c", help="Requests in flight; repeat for "
                                          "several levels."),
    state: list[str] = typer.Option(["memory", "sqlite", "redis"], "--state", help="State stores to measure the "
                                    "gateway with; repeat for several."),
    n: int = typer.Option(300, "--requests", "-n", help="Requests per cell (c = 1 sends a third)."),
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="The pool (each endpoint gets a replay server)."),
    data_root: Path = typer.Option(DATA_ROOT, help="Shared data root (bfcl_v1/ and the recorded outputs)."),
    out: Path = typer.Option(Path("runs/bench_overhead.md"), "--out", "-o", help="Markdown table (+ .json)."),
) -> None:
    from evaluation.bench import overhead

    _run_loopback_bench(overhead, router, out, lambda: overhead.OverheadConfig(
        router_dir=router, data_root=data_root, pool=pool, concurrency=list(concurrency), states=list(state),
        requests=n), overhead.run_overhead)


def bench_soak(
    router: Path = typer.Option(Path("runs/bfcl_v1/router_onnx"), "--router", help="An exported router (switchcraft "
                                "export); reloaded from the same directory during the run."),
    minutes: float = typer.Option(10.0, "--minutes", help="How long to run (at most 120)."),
    concurrency: int = typer.Option(8, "--concurrency", "-c", help="Requests in flight at once."),
    reload_every: float = typer.Option(60.0, "--reload-every", help="Seconds between router reloads."),
    pool: Path = typer.Option(Path("configs/pool.yaml"), help="The pool (each endpoint gets a replay server)."),
    data_root: Path = typer.Option(DATA_ROOT, help="Shared data root (bfcl_v1/ and the recorded outputs)."),
    out: Path = typer.Option(Path("runs/bench_soak.md"), "--out", "-o", help="Markdown table (+ .json, .png)."),
) -> None:
    from evaluation.bench import soak

    _run_loopback_bench(soak, router, out, lambda: soak.SoakConfig(
        router_dir=router, data_root=data_root, pool=pool, minutes=minutes, concurrency=concurrency,
        reload_every_s=reload_every), soak.run_soak)


def _run_loopback_bench(module, router: Path, out: Path, make_config, run) -> None:
    """Check the exported router, run the bench with a progress line, write and print its table (the
    benchmark module's to_markdown / write_results)."""
    try:
        cfg = make_config()
        if not (router / "router.json").exists():
            raise FileNotFoundError(f"{router}: no router.json; export one first: switchcraft export ROUTER --out {router}")
        with console.status("starting") as status:
            result = run(cfg, progress=lambda what: status.update(what))
    except (FileNotFoundError, ValueError, RuntimeError, TimeoutError) as e:
        fail(str(e))
    module.write_results(result, out)
    console.print(module.to_markdown(result), highlight=False, markup=False, soft_wrap=True)
    console.print(f"wrote {out} (and its .json{', .png' if out.with_suffix('.png').exists() else ''})",
                  highlight=False)


def bench_pool(
    concurrency: list[int] = typer.Option([8, 64], "--concurrency", help="Workers of the one model; repeat for "
                                          "several levels (--concurrency 8 --concurrency 64)."),
    calls: int = typer.Option(1630, "--calls", help="BFCL v1 queries sent at each level."),
    data_root: Path = typer.Option(DATA_ROOT, help="Shared data root (bfcl_v1/ and the recorded outputs)."),
    out: Path = typer.Option(Path("runs/bench/bench_pool.json"), "--out", help="Where the JSON record goes."),
) -> None:
    """Pool-runner throughput against the replay server over loopback HTTP."""
    from evaluation.bench._support import write_json
    from evaluation.bench.pool import bench_pool as run

    write_json(out, run(list(concurrency), calls, data_root))
    console.print(f"wrote {out}", highlight=False)


def bench_train(
    config: str = typer.Option("configs/train.yaml", "--config", help="Training config."),
    run_dir: Path = typer.Option(Path("runs/bench"), "--run-dir", help="Cases run under it; bench_train.json too."),
    only: str = typer.Option("frozen", "--only", help="comma-separated: frozen,finetune,distilbert,add_model"),
    steps: int = typer.Option(40, "--steps", help="training steps for the fine-tune timing cases (0: a whole epoch)"),
    overrides: list[str] = typer.Argument(None, help="extra key=value overrides for every case"),
) -> None:
    """Wall-clock and held-out quality of the router's training modes on this machine."""
    from evaluation.bench.train import main

    try:
        main(config, run_dir, only, steps, list(overrides or []))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))


def bench_long_input(
    router: Path = typer.Option(..., "--router", help="A router folder with router.json and tokenizer/ (trained or "
                                "exported)."),
    reps: int = typer.Option(30, "--reps", help="Runs per row."),
    whole_reps: int = typer.Option(3, "--whole-reps", help="runs of the 2 MB whole text (~17 s each here)"),
) -> None:
    """What routing costs before inference for a 2 KB and a 2 MB message: body parse, schema, packing, metadata."""
    from evaluation.bench._support import md_table
    from evaluation.bench.long_input import measure

    show = lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    show("\n".join(md_table(["encoder", "body", "median ms", "95% CI", "runs"], [], "lrrlr")))  # then row by row
    measure(router, reps, whole_reps, on_row=lambda r: show(
        f"| {r['encoder']} | {r['bytes']:,} B | {r['median_ms']:.1f} | [{r['low_ms']:.1f}, {r['high_ms']:.1f}] | "
        f"{r['runs']} |"))


def bench_router_ab(
    a: str = typer.Argument(..., help="Exported router A (a router_onnx folder)."),
    b: str = typer.Argument(..., help="Exported router B."),
    n: int = typer.Option(300, "--n", help="BFCL v1 requests, spread over the file."),
    data_root: Path = typer.Option(Path("../shared/data"), "--data-root", help="Shared data root holding bfcl_v1/."),
) -> None:
    """A/B routing latency of two exported routers, interleaved request by request (in-process ONNX Runtime): a
    relative check; the absolute figures are `bench serve`'s."""
    from evaluation.bench.serve import ab_latency

    for name, s in ab_latency(a, b, n, data_root).items():
        console.print(f"{name}: P50 {s['p50_ms']:.2f} ms, P99 {s['p99_ms']:.2f} ms over {s['n']} requests",
                      highlight=False, markup=False, soft_wrap=True)


def bench_tools(
    tools: int = typer.Option(5000, "--tools", help="Catalog size (BFCL tools topped up with Seal-Tools)."),
    queries: int = typer.Option(1000, "--queries", help="Distinct queries routed."),
    data_root: str = typer.Option("../shared/data", "--data-root", help="Shared data root."),
    run_dir: str = typer.Option("runs/tools", "--run-dir", help="Indexes and the record go here."),
    config: str = typer.Option("configs/tools.yaml", "--config", help="tools config whose retrieval settings are used"),
    overrides: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help=SET_HELP),
    out: str = typer.Option("bench.json", "--out", help="file name under --run-dir"),
    stages: float = typer.Option(None, "--stages", metavar="HEAD", help="instead: thread-CPU ms of each stage, and of "
                                 "the exposure step with sibling fill at this head share vs without (→ --out under "
                                 "--run-dir)"),
) -> None:
    """Latency of routing one request over a 5,000-tool catalog, query embedding included."""
    from evaluation.bench.tools import main

    main(tools, queries, data_root, run_dir, config, list(overrides), out, stages)


def bench_loop(
    router: Path = typer.Option(Path("runs/bfcl_v1/router_onnx"), "--router", help="The router in service at the start."),
    data_root: Path = typer.Option(DATA_ROOT, "--data-root", help="Shared data root (bfcl_v1/ and the recordings)."),
    requests: int = typer.Option(200, "--requests", help="BFCL v1 queries served and logged to learn from."),
    score: int = typer.Option(200, "--score", help="The next queries, served and scored after the reload."),
    add_model: str = typer.Option(None, "--add-model", help="A model of configs/pools/*.yaml to add partway."),
    out: Path = typer.Option(Path("runs/loop"), "--out", help="Work folder; loop.json is written in it."),
) -> None:
    """The learning loop on loopback, on replayed BFCL v1 traffic: serve → log + explore → learn → reload → score."""
    import json

    from evaluation.jobs.loop import main

    try:
        res = main(router, data_root, out, requests=requests, score=score, add_model=add_model)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    console.print(json.dumps({"before": res.before, "after": res.after, "learn": res.learn}, indent=1, default=str),
                  highlight=False, markup=False)


def bench_mcp(
    servers: int = typer.Option(10, "--servers", help="Upstream MCP servers (one process, Streamable HTTP)."),
    tools: int = typer.Option(1000, "--tools", help="Tools in all, split evenly (real BFCL function docs)."),
    requests: int = typer.Option(500, "--requests", help="Requests timed per operation."),
    data_root: str = typer.Option(str(DATA_ROOT), "--data-root", help="Shared data root (BFCL thousand_tools)."),
    run_dir: str = typer.Option("runs/mcp", "--run-dir", help="The fleet's tools, the config and bench.json go here."),
) -> None:
    """What the MCP gateway adds per tools/list and tools/call (P50/P99), with N upstream servers and their tools."""
    from evaluation.bench.mcp import run, to_markdown

    console.print(to_markdown(run(servers, tools, requests, data_root, run_dir)), highlight=False, markup=False,
                  soft_wrap=True)
    console.print(f"→ {Path(run_dir) / 'bench.json'}", highlight=False)


def bench_mcp_recall(
    bench: str = typer.Option("metatool", "--bench", help="metatool | seal_tools | stabletoolbench | bfcl"),
    limit: int = typer.Option(2000, "--limit", help="Held-out queries, a fixed sample (0: all)."),
    data_root: Path = typer.Option(DATA_ROOT, "--data-root", help="Shared data root."),
    run_dir: Path = typer.Option(Path("runs/mcp"), "--run-dir", help="Where recall_<bench>.json goes."),
) -> None:
    """find_tools through the MCP gateway against the in-process tool router: Recall@K on a held-out set."""
    import json

    from evaluation.jobs.mcp_recall import run, server_name

    r = run(bench, limit, str(data_root), str(run_dir))
    console.print(json.dumps({k: r[k] for k in ("benchmark", "queries", "tools", "served", "recall",
                                                 "same_top10_as_in_process_gateway_catalog")}, indent=2),
                  highlight=False, markup=False)
    console.print(f"→ {run_dir / f'recall_{server_name(bench)}.json'}", highlight=False)


def bench_sessions(router: Path = Path("runs/v3/router"), pool: Path = Path("configs/pools/bfcl_v3_2025.yaml"),
                   outputs: Path | None = None, category: list[str] = [  # noqa: B006
                       "multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"],
                   limit: int | None = None, threshold: list[float] = [],  # noqa: B006
                   turn_gap_s: float = 20.0, data: str = "package:bfcl_eval/data", out: Path | None = None) -> None:
    """Per-call vs session-aware routing on BFCL v4 multi-turn conversations: $ per million conversations (95%
    bootstrap intervals), the paired difference, how often each switches model (a cost simulation); one table row
    set per --threshold τ (the gateway's `router-<τ>`; none: the router's own)."""
    from evaluation.offline.sessions import SessionBenchConfig, run_bench, to_markdown

    try:
        result = run_bench(SessionBenchConfig(router=router, pool=pool, source_path=data, categories=tuple(category),
                                              limit=limit, thresholds=tuple(threshold) or (None,), outputs=outputs,
                                              turn_gap_s=turn_gap_s, out=out))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    console.print(to_markdown(result), highlight=False, markup=False, soft_wrap=True)


def bench_console(requests: int = 1_000_000, days: float = 30.0, out: Path = Path("runs/bench_console.md"),
                  log_dir: Path | None = None, router: Path = Path("runs/bfcl_v1/router_onnx"),
                  pool: Path = Path("configs/pool.yaml"), explore: float = 0.01, repeat: int = 3, seed: int = 0,
                  screenshots: Path | None = None,
                  log: str = typer.Option("sqlite", help="Where the log lies: sqlite (files in --log-dir) or postgres "
                                          "(a throwaway PostgreSQL server, as a fleet's log.url)."),
                  note: list[str] = []) -> None:  # noqa: B006
    """The console's page render times over a synthetic decision log of --requests requests (written through the
    gateway's log writer, to --log-dir, default <out>_log/, or --log postgres): each view for 24h, 7d and all,
    markdown + .json; --screenshots DIR keeps PNGs of Savings and Quality taken in headless Chromium."""
    from evaluation.bench.console import ConsoleBenchConfig, run_console_bench, to_markdown, write_results

    try:
        result = run_console_bench(ConsoleBenchConfig(requests, days, out, log_dir, router, pool, explore, repeat, seed,
                                                      screenshots, log=log, notes=list(note)))
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        fail(str(e))
    write_results(result, out)
    console.print(to_markdown(result), highlight=False, markup=False, soft_wrap=True)
    if shots := result.get("screenshots"):
        console.print(f"no screenshots: {shots}" if isinstance(shots, str) else "screenshots: " + ", ".join(shots),
                      highlight=False, markup=False)
    console.print(f"wrote {out} and {out.with_suffix('.json')}", highlight=False)


def bench_learn(requests: int = 100_000, explore: float = 0.05, out: Path = Path("runs/bench_learn.md"),
                pool: Path = Path("configs/pool.yaml"), max_mb: float = 256.0, seed: int = 0,
                read_only: bool = typer.Option(False, help="Only the read stage (no training)."),
                whole_read: bool = typer.Option(False, help="Also read the log whole into memory (read_log), "
                                                "for comparison."),
                max_explored: int = typer.Option(None, help="learn's window: the newest explored requests it "
                                                 "learns from (default: learn's)."),
                overrides: list[str] = typer.Option([], "--set", help=SET_HELP + " (configs/train.yaml)"),
                note: list[str] = []) -> None:  # noqa: B006
    """`switchcraft learn` on a synthetic decision log of --requests requests (--explore of them answered by every
    pool model; written through the gateway's log writer to <out>_work/log): each stage's seconds and peak memory,
    markdown + .json."""
    from data.errors import DataError
    from evaluation.bench.learn import LearnBenchConfig, run_learn_bench, to_markdown, write_results

    try:
        result = run_learn_bench(LearnBenchConfig(requests, explore, out, pool, max_mb, seed=seed,
                                                  train=list(overrides), read_only=read_only, whole_read=whole_read,
                                                  max_explored=max_explored, notes=list(note)), console=console)
    except (DataError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    write_results(result, out)
    console.print(to_markdown(result), highlight=False, markup=False, soft_wrap=True)
    console.print(f"wrote {out} and {out.with_suffix('.json')}", highlight=False)
