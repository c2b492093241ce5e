"""`switchcraft learn`: a new router and strategy policy from the gateway's decision log (consensus labels).

    switchcraft learn --from-log runs/gateway/log --run-dir runs/learned
    switchcraft learn --from-log runs/gateway/log --run-dir runs/learned --data-root ../shared/data   # + truth scores
    switchcraft learn --from-log runs/gateway/log --run-dir runs/learned --budget 400    # ≤ $400 per M requests
    switchcraft learn --from-log postgresql://learn@db:5432/switchcraft --run-dir runs/learned   # a fleet's log

Wiring: `register(app)` adds `learn`.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.table import Table

from switchcraft.console import console, fail


def register(app: typer.Typer) -> None:
    app.command("learn", help="Learn from served traffic: consensus labels from the decision log, a new router and "
                              "strategy policy, compared with the one in service on held-out logged requests.")(learn)


def learn(
    from_log: str = typer.Option(..., "--from-log", help="The decision log: its folder (the gateway's log.path) "
                                 "or its PostgreSQL URL (log.url, postgresql://user@host:port/db)."),
    run_dir: Path = typer.Option(Path("runs/learned"), "--run-dir", help="Where the labels, router and "
                                 "router_onnx/ (ready to serve) go."),
    pool: Path = typer.Option(Path("configs/pools/bfcl_v3_2025.yaml"), help="The pool the gateway serves (configs/serving.yaml's)."),
    train_config: Path = typer.Option(Path("configs/train.yaml"), help="Training config (the usual recipe)."),
    holdout: float = typer.Option(0.25, help="The latest share of requests held out for the comparison."),
    data_root: Path = typer.Option(None, help="Shared data root: requests naming a BFCL v1 query "
                                   "(metadata.example_id) are also scored with the verifier's true labels."),
    budget: float = typer.Option(None, "--budget", help="The strategy policy's cost target in USD per million "
                                 "requests (recommended; default: 20% of the cost of the model the consensus labels "
                                 "rank first, which moves if they swap two near-tied models)."),
    max_explored: int = typer.Option(None, help="The learning window: the newest explored requests (every pool "
                                     "model answered) learned from (default: evaluation.jobs.learn.MAX_EXPLORED, "
                                     "5,000); memory and time after the read grow with it, not with the log."),
    overrides: list[str] = typer.Argument(None, help="Training config overrides key=value."),
) -> None:
    from data.errors import DataError
    from evaluation.jobs.learn import MAX_EXPLORED
    from evaluation.jobs.learn import learn as run_learn

    root = data_root or (Path(os.environ["SWITCHCRAFT_DATA_ROOT"]) if os.environ.get("SWITCHCRAFT_DATA_ROOT") else None)
    try:
        res = run_learn(from_log, run_dir, pool_path=pool, train_config=train_config, train_overrides=list(overrides or []),
                        holdout=holdout, data_root=root, budget_usd_per_million=budget,
                        max_explored=max_explored or MAX_EXPLORED, console=console)
    except (DataError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    c = res.comparison
    table = Table(title=f"held-out logged requests (n = {c['n']}): in service vs learned")
    for col in ("router", "accuracy (consensus) [95% CI]", "accuracy (true labels) [95% CI]", "$ / M requests"):
        table.add_column(col)
    for who, name in (("in_service", "in service"), ("new", f"learned ({c['router_version']})")):
        r = c[who]
        table.add_row(name, _ci(r["accuracy_consensus"]), _ci(r.get("accuracy_true")) + (
            f" (n = {r['n_true']})" if r.get("n_true") else ""), f"{r['usd_per_million']:,.0f}")
    console.print(table)
    console.print(f"learned − in service (consensus, paired): {_ci(c['new_minus_in_service_consensus'])}; "
                  f"$ / M: {_ci(c.get('new_minus_in_service_usd_per_million'), '{:+,.0f}')}", highlight=False)
    verdict = c["rollout"]
    if verdict["verdict"] == "keep":
        fail(f"keep the router in service: the learned router is {verdict['why']}. It is in {res.onnx_dir} "
             "(router.json `rollout` says keep); /v1/admin/reload refuses it unless {\"force\": true}", code=3)
    console.print(f"ready to serve ({verdict['why']}): {res.onnx_dir}  (POST /v1/admin/reload "
                  f"{{\"dir\": \"{res.onnx_dir}\"}} with an admin key, or router.dir + SIGHUP)", highlight=False)


def _ci(x: dict | None, fmt: str = "{:.3f}") -> str:
    if not x or x.get("mean") is None:
        return "—"
    return f"{fmt.format(x['mean'])} [{fmt.format(x['low'])}, {fmt.format(x['high'])}]"
