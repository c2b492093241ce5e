"""`switchcraft train`: train the router (grouped k-fold CV, then the router on everything), or add a model.

    switchcraft train --config configs/train.yaml
    switchcraft train --config configs/train.yaml mode=finetune finetune.epochs=1 max_folds=1
    switchcraft train --config configs/train.yaml --add-model open-mistral-nemo-2407-FC-Auto
"""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from switchcraft.console import console, fail


def register(app: typer.Typer) -> None:
    app.command(
        "train",
        context_settings={"allow_extra_args": False},
        help="Train the router from labels (key=value arguments override configs/train.yaml).",
    )(train)


def train(
    overrides: list[str] = typer.Argument(None, help="Config overrides, key=value (dotted keys for sections)."),
    config: Path = typer.Option(Path("configs/train.yaml"), "--config", "-c", help="Training config."),
    add_model: str = typer.Option(None, "--add-model", help="Add this pool model to a trained router (encoder frozen)."),
) -> None:
    from data.errors import DataError
    from data.registry import UnknownNameError
    from training.config import load_train_config

    try:
        cfg = load_train_config(config, overrides or [])
        if add_model:
            from training.add_model import add_model as run_add

            m = run_add(cfg, add_model)
            console.print(
                f"added {m['model']} to {cfg.router_dir}: held-out AUC {m['auc']:.3f}, ECE {m['ece']:.3f} "
                f"({m['n']} examples, {cfg.max_folds or cfg.folds} folds) in {m['seconds']:.0f} s",
                highlight=False,
            )
            return
        from training.recipe import run_training

        metrics = run_training(cfg)
    except (DataError, UnknownNameError, FileNotFoundError, KeyError) as e:
        fail(str(e))
    _print_metrics(console, metrics, cfg)


def _print_metrics(console: Console, m: dict, cfg) -> None:
    table = Table(title=f"Held-out ({m['folds_run']} of {m['folds']} folds, {m['n_examples']} examples, {m['mode']})")
    for col in ("model", "base rate", "AUC", "ECE", "ECE before T", "T kept"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, v in m["per_model"].items():
        table.add_row(name, f"{v['base_rate']:.3f}", _f(v["auc"]), _f(v["ece"]), _f(v["ece_uncalibrated"]),
                      "yes" if v["temperature_helps"] else "no")
    table.add_row("[bold]macro[/]", "", _f(m["macro_auc"]), _f(m["macro_ece"]), "", "")
    console.print(table)
    t = m.get("timing", {})
    console.print(
        f"setup {t.get('setup_s', 0):.0f} s, features {t.get('features_s', 0):.0f} s"
        f"{' (cached)' if t.get('features_cached') else ''}, total {t.get('total_s', 0):.0f} s; "
        f"router in {cfg.router_dir}, held-out predictions in {Path(cfg.run_dir) / 'oof_predictions.parquet'}",
        highlight=False,
    )


def _f(x) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.3f}"
