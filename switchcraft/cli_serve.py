"""`switchcraft export`, `switchcraft serve` and `switchcraft gateway-key` (`bench serve` is in cli_bench.py).

    switchcraft export runs/default/router --out runs/default/router_onnx --int8 --triton
    switchcraft serve --config configs/serving.yaml router.backend=triton-grpc router.triton_url=127.0.0.1:8001
    switchcraft serve --workers 4 state.path=runs/gateway log.path=runs/gateway/log     # four processes, one port
    switchcraft gateway-key --id acme-support --tenant acme --role support --out keys.yaml

Wiring: `register(app)` adds export, serve and gateway-key.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from switchcraft.console import console, err, fail

DATA_ROOT = Path(os.environ.get("SWITCHCRAFT_DATA_ROOT", "../shared/data"))


def register(app: typer.Typer) -> None:
    app.command("export", help="Export a trained router to ONNX (validated against PyTorch); --triton writes the model repository.")(export)
    app.command("serve", help="Run the routing gateway (OpenAI-compatible) from configs/serving.yaml.")(serve)
    app.command("gateway-key", help="Make a gateway API key for auth.keys_file, a seed of the state store's keys "
                "(`switchcraft keys add` stores one there directly): prints it once, and its hashed entry.")(gateway_key)


def export(
    router_dir: Path = typer.Argument(..., help="A trained router folder (switchcraft train)."),
    out: Path = typer.Option(None, "--out", "-o", help="ONNX router folder (default: <router_dir>_onnx)."),
    int8: bool = typer.Option(False, "--int8", help="Also write a dynamic INT8 graph, with its agreement and speed-up."),
    triton: bool = typer.Option(False, "--triton", help="Also write the Triton model repository."),
    triton_dir: Path = typer.Option(None, help="Where the repository goes (default: <out>/model_repository)."),
    validate: int = typer.Option(400, help="Requests to validate on (0: all of them)."),
    data_root: Path = typer.Option(DATA_ROOT, help="Shared data root holding bfcl_v1/ (the default requests)."),
    examples: Path = typer.Option(None, help="Validate on this examples.parquet instead (default: BFCL v1 under "
                                  "--data-root, else the examples.parquet beside the router's folder)."),
    threads: int = typer.Option(None, help="ONNX Runtime threads for validation timing."),
) -> None:
    """Export, fuse, validate (max |Δp| ≤ 1e-4 and identical decisions), optionally quantise and write Triton's repository."""
    import json

    import numpy as np

    from data.errors import DataError
    from serving.client import policy_from_info
    from serving.policy import choose_batch
    from training.export import export_router

    out = out or router_dir.with_name(router_dir.name + "_onnx")
    if not (router_dir / "router.json").exists():
        fail(f"{router_dir}: no router.json; train a router first: switchcraft train --config configs/train.yaml")
    try:
        info = json.loads((router_dir / "router.json").read_text())
        policy = policy_from_info(info)
        costs = np.array([policy.costs[m] for m in policy.models])
        requests, source = validation_requests(router_dir, data_root, examples, validate or 10**9)
        console.print(f"exporting {router_dir} → {out}; validating on {len(requests)} requests of {source}",
                      highlight=False)
        report = export_router(router_dir, out, requests=requests, int8=int8, threads=threads,
                               decide=lambda p: choose_batch(p, costs, policy.threshold))
    except (FileNotFoundError, DataError, ValueError) as e:
        fail(str(e))
    console.print(f"fp32: max |Δp| vs PyTorch {report.max_abs_diff_fp32:.2e}, identical decisions "
                  f"{report.decisions_equal_fp32:.1%}; fused {report.fused_ops}", highlight=False)
    if report.int8:
        q = report.int8
        console.print(f"int8: decision agreement with fp32 {q['decision_agreement']:.2%}, max |Δp| {q['max_abs_diff']:.3f}, "
                      f"P50 {q['p50_fp32_ms']:.1f} → {q['p50_int8_ms']:.1f} ms ({q['speedup']:.2f}×)", highlight=False)
        if q.get("rejected"):
            console.print(f"[yellow]int8 not served:[/] {q['rejected']} ({out / 'router.int8.onnx'} kept for inspection)",
                          highlight=False)
    if triton:
        from serving.triton import write_model_repository

        repo = write_model_repository(out, triton_dir or out / "model_repository", int8=False)
        console.print(f"Triton model repository: {repo} (gpu/ for the official container, cpu/ for the bundled server)",
                      highlight=False)
    console.print(f"wrote {out} in {report.seconds:.0f} s", highlight=False)


def validation_requests(router_dir: Path, data_root: Path, examples: Path | None, n: int) -> tuple[list, str]:
    """(requests, where they come from) to check the ONNX graph against PyTorch on: --examples, else BFCL v1 under
    the data root, else the run's examples.parquet beside the router's folder."""
    from data.schema import read_examples

    if examples is None and not (data_root / "bfcl_v1").exists():
        beside = router_dir.resolve().parent / "examples.parquet"
        if not beside.exists():
            raise FileNotFoundError(f"no requests to validate the export on: {data_root / 'bfcl_v1'} is not there and "
                                    f"there is no {beside}; give --data-root DIR (the folder holding bfcl_v1/) or "
                                    "--examples FILE (an examples.parquet, e.g. a run directory's)")
        examples = beside
    if examples is None:
        from evaluation.bench.serve import bench_requests

        return bench_requests(data_root, n), "BFCL v1"
    rows = read_examples(examples)
    step = max(1, len(rows) // n)
    return [(e.messages, e.tools) for e in rows[::step][:n]], str(examples)


def serve(
    overrides: list[str] = typer.Argument(None, help="Config overrides, key=value (dotted keys for sections)."),
    config: Path = typer.Option(Path("configs/serving.yaml"), "--config", "-c", help="Serving config."),
    host: str = typer.Option(None, help="Bind address (default: the config's host, 127.0.0.1)."),
    port: int = typer.Option(None, help="Port (default: the config's port, 8080)."),
    workers: int = typer.Option(None, help="Gateway processes on the port (default: the config's workers, 1); above 1 "
                                "they need a shared state store (state.path or state.redis_url)."),
    replica: str = typer.Option(None, help="This gateway's name in the decision log (default: the host's name)."),
) -> None:
    """Load the router and the pool, then serve on cfg.host:cfg.port (127.0.0.1:8080 by default)."""
    from data.errors import DataError
    from data.pool import load_pool
    from serving.app import UNAUTHENTICATED, bind, load_served, run_served, run_workers
    from serving.core.auth import KeyStore
    from serving.core.state import StateUnavailable
    from serving.gateway.admin import missing_credentials
    from serving.gateway.config import load_serving_config

    given = [f"{k}={v}" for k, v in (("host", host), ("port", port), ("workers", workers), ("replica", replica))
             if v is not None]
    args = [*(overrides or []), *given]
    try:
        cfg = load_serving_config(config, args)
        if cfg.workers == 1:
            cfg, app, client = load_served(config, args)
            pool, keys = app.state.gateway.pool, app.state.keys
            router = f"router {client.version}, {client.backend.name}"
        else:  # each worker loads the router itself (serving/app.py worker_app)
            pool = load_pool(cfg.upstream.pool)
            keys = KeyStore.from_settings(cfg.auth, pool.names, durable_store=True)  # workers share a store
            router = f"{cfg.workers} workers, router {cfg.router.dir}, {cfg.router.backend}"
        sock = bind(cfg)
    except (FileNotFoundError, DataError, ValueError, StateUnavailable) as e:
        fail(str(e))
    if cfg.auth.mode == "none":
        err.print("[bold red]WARNING:[/] " + UNAUTHENTICATED.format(where=f"{cfg.host}:{cfg.port}"), highlight=False)
    missing = missing_credentials(pool)
    if missing:
        names = sorted(set(missing.values()))
        err.print(f"[bold yellow]warning:[/] {len(missing)} of {len(pool.models)} pool models have "
                  f"no provider key; export {', '.join(names)} (the pool file's api_key_env) or they answer 502"
                  + ("; /readyz is not ready until one has" if len(missing) == len(pool.models) else ""),
                  highlight=False)
    described = "no API keys (auth.mode: none)" if cfg.auth.mode == "none" else (
        f"API keys from the state store, {len(keys.seeds)} seeded from auth.keys_file / keys_env; "
        "`switchcraft keys list`")
    console.print(f"switchcraft gateway on http://{cfg.host}:{cfg.port} ({router}, {described})", highlight=False)
    if cfg.workers == 1:
        run_served(cfg, app, client, sock)
        return
    try:
        run_workers(config, args, cfg, sock)
    except ValueError as e:
        fail(str(e))


def gateway_key(
    key_id: str = typer.Option(..., "--id", help="The key's name in logs and metrics (letters, digits, _ . -)."),
    tenant: str = typer.Option("", help="The caller's tenant."),
    role: list[str] = typer.Option([], "--role", help="A role (repeat for several)."),
    permission: list[str] = typer.Option([], "--permission", help="A permission granted directly (repeatable)."),
    environment: str = typer.Option("prod", help="The caller's environment."),
    rpm: int = typer.Option(None, "--requests-per-minute", help="Limit: requests per minute."),
    usd_per_day: float = typer.Option(None, help="Limit: USD per UTC day."),
    model: list[str] = typer.Option([], "--model", help="Limit: a pool model this key may use (repeatable)."),
    out: Path = typer.Option(None, "--out", "-o", help="Append the entry to this keys file (auth.keys_file)."),
    admin: bool = typer.Option(False, "--admin", help="An admin key: may also read /metrics, /readyz details, "
                               "/v1/admin/spend and reload the router (/v1/admin/reload)."),
) -> None:
    """The key is printed once and never stored: the file holds its sha256 only."""
    import yaml

    from pydantic import ValidationError

    from serving.core.auth import KeyEntry, first_error, hash_key, new_key

    key = new_key()
    limits = {k: v for k, v in (("requests_per_minute", rpm), ("usd_per_day", usd_per_day),
                                ("models", list(model) or None)) if v is not None}
    try:
        entry = KeyEntry(id=key_id, sha256=hash_key(key), caller={"tenant": tenant, "roles": role,
                                                                  "permissions": permission, "environment": environment},
                         limits=limits, role="admin" if admin else "caller")
    except ValidationError as e:
        where, message = first_error(e)
        option = {"id": "--id", "caller.roles": "--role", "caller.permissions": "--permission",
                  "caller.tenant": "--tenant", "caller.environment": "--environment"}.get(where, where)
        fail(f"{option}: {message}" if option else message)
    data = entry.model_dump(mode="json", exclude_none=True, exclude={"key"} | (set() if admin else {"role"}))
    text = yaml.safe_dump([data], sort_keys=False)
    if out is not None:
        existing = yaml.safe_load(out.read_text()) if out.exists() else None
        keys = (existing or {}).get("keys") or []
        if any(k.get("id") == key_id for k in keys):
            fail(f"{out} already has a key with id {key_id!r}; pick another --id")
        out.write_text(yaml.safe_dump({"keys": [*keys, data]}, sort_keys=False))
        console.print(f"appended {key_id} to {out}", highlight=False)
    else:
        console.print("# add under `keys:` in auth.keys_file\n" + text, highlight=False, markup=False)
    err.print(f"API key (shown once; only its hash is kept): {key}", highlight=False, markup=False, soft_wrap=True)
