"""`switchcraft transfer`: a router trained on one run's queries, scored on another run's (shared models only).

    switchcraft transfer --train-run runs/v3 --test-run runs/nexus                 # BFCL v3 → NexusBench
    switchcraft transfer --train-run runs/nexus --test-run runs/v3                 # NexusBench → BFCL v3
    switchcraft transfer --train-run runs/v3 --test-run runs/v3 --split live_      # non-live → live (retrains)

Writes transfer.md, transfer.csv, per_category.csv and transfer.json (`evaluation.offline.transfer`).
Wiring: `register(app)` adds `transfer`.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from switchcraft.console import console, fail


def register(app: typer.Typer) -> None:
    app.command("transfer", help="Score a run's router (and strategy policy) on another run's queries, over the "
                                 "models both pools share, with 95% intervals.")(transfer)


def transfer(
    train_run: Path = typer.Option(..., "--train-run", help="The run whose router/ is transferred."),
    test_run: Path = typer.Option(..., "--test-run", help="The run whose labelled queries it is scored on."),
    out: Path = typer.Option(None, "--out", help="Where the tables go (default: runs/transfer/<train>_to_<test>)."),
    split: str = typer.Option(None, "--split", help="A category prefix (or glob): retrain the train run's router "
                              "on its other categories (into <out>/train), test on the test run's matching ones."),
    train_config: Path = typer.Option(Path("configs/train.yaml"), help="Training config, for --split."),
    override: list[str] = typer.Argument(None, help="Training config overrides key=value, for --split."),
) -> None:
    from data.errors import DataError
    from evaluation.offline.transfer import category_filter, load_side, split_router, write_transfer
    from evaluation.offline.transfer import transfer as run_transfer

    name = f"{train_run.name}_to_{test_run.name}" + (f"_split_{split.strip('*_') or 'split'}" if split else "")
    out = out or Path("runs/transfer") / name
    t0 = time.perf_counter()
    try:
        if split:
            console.print(f"retraining {train_run}'s router on its categories outside {split!r} → {out / 'train'}")
            train_dir = split_router(train_run, out / "train", split, train_config=train_config, overrides=override)
            train, test = load_side(train_dir), load_side(test_run, keep=category_filter(split, inside=True))
        else:
            train, test = load_side(train_run), load_side(test_run)
        result = run_transfer(train, test)
    except (DataError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    path = write_transfer(result, out)
    console.print(path.read_text(), highlight=False, markup=False)
    console.print(f"transfer: {time.perf_counter() - t0:.0f} s; tables in {out}", highlight=False)
