"""The category branch refitted per fold for several classifier Cs on a finished run, without retraining the rest.

    .venv/bin/python -m evaluation.category_refit RUN_DIR OUT_DIR [--c 1,10,100]
    .venv/bin/python -m evaluation.prior_gap OUT_DIR        # then: the weight and C chosen on inner folds

A run trained before `category.c_grid` existed holds the branch's held-out logits for one C only
(`oof_parts.npz` "category"). This refits the branch exactly as the recipe does for each fold — the same rows
(the fold's training and validation split, `grouped_split` with the run's seed), the same TF-IDF vocabulary
(it depends on the rows' word pieces only), the metadata scaled on the training split — once per C, and writes
OUT_DIR/oof_parts.npz with `category_c<C>` added (what a run with `category.c_grid` writes). The run's
labels, examples and oof predictions are linked into OUT_DIR, so `evaluation.prior_gap OUT_DIR` reads it as a
run. It checks that the run's C reproduces the stored logits and says so (`max |Δ|`); the head and lexical
parts are copied unchanged. Cost: one TF-IDF pass and one multinomial fit per fold and C (~3–4 s idle here).

`--embedding SCALE` (a measured lever, not what `switchcraft train` does): the classifier also reads the frozen
encoder's pooled request vector (the run's `cache/features-*.pt`, which the head already reads), standardised
on the fold's fit rows and multiplied by SCALE, beside the TF-IDF and the metadata. The per-C parts are then
that variant's (and `max |Δ|` says how far it moves from the stored branch).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from data.schema import read_examples, read_labels
from training.category import CategoryModel
from training.config import TrainConfig, load_train_config
from training.dataset import build_table
from training.folds import grouped_split
from training.lexical import LexicalModel
from training.metadata import MetadataScaler
from training.recipe import PARTS_FILE

LINKED = ("examples.parquet", "labels.parquet", "oof_predictions.parquet")


class FoldFit(NamedTuple):
    table: Any  # training.dataset's table of the run's examples
    test: np.ndarray  # the held-out fold's rows
    rows: np.ndarray  # the rows the recipe fits the branch on (training split, + validation without temperature)
    x: Any  # their TF-IDF (the fold's lexical vocabulary)
    x_test: Any  # the held-out rows' TF-IDF
    meta: np.ndarray  # every row's metadata, scaled on the training split


def run_config(run: Path) -> TrainConfig:
    """The run's training config (router.json's, else configs/train.yaml with the run's data paths)."""
    info = run / "router" / "router.json"
    if info.exists():
        cfg = json.loads(info.read_text())["config"]
        cfg["category"] = {k: v for k, v in cfg.get("category", {}).items() if k in ("enabled", "weight", "c", "prior_rows")}
        return TrainConfig.model_validate(cfg)
    return load_train_config("configs/train.yaml", [f"run_dir={run}"])


def fold_fits(run: Path, cfg: TrainConfig, parts: dict[str, np.ndarray]) -> Iterator[FoldFit]:
    """Per finished fold, the branch's inputs exactly as the recipe builds them (`evaluation.category_hard` too)."""
    from transformers import AutoTokenizer

    from training.model import resolve_backbone

    models, fold = [str(m) for m in parts["models"]], parts["fold"]
    tok = AutoTokenizer.from_pretrained(cfg.backbone.tokenizer or resolve_backbone(cfg.backbone.name), local_files_only=True)
    examples = read_examples(run / "examples.parquet")
    t = build_table(examples, read_labels(run / "labels.parquet"), models, tok, cfg.packing)
    if list(t.example_ids) != [str(e) for e in parts["example_ids"]]:
        raise SystemExit(f"{run}: the rebuilt table's examples are not the run's ({PARTS_FILE}); cannot refit")
    for f in sorted(int(k) for k in set(fold.tolist()) if k >= 0):
        test = np.flatnonzero(fold == f)
        tr, va = grouped_split(t.groups, np.flatnonzero(fold != f), cfg.val_fraction, cfg.seed + f)
        rows = tr if cfg.temperature_scaling else np.concatenate([tr, va])
        meta = MetadataScaler.fit(t.meta_raw[tr]).transform(t.meta_raw)
        lex = LexicalModel.fit([t.ids[i] for i in rows], np.zeros((len(rows), 0)), np.zeros((len(rows), 0), bool),
                               special_ids=tok.all_special_ids,
                               vocab_size=max(int(tok.vocab_size), len(tok)), buckets=cfg.lexical.buckets,
                               min_df=cfg.lexical.min_df, max_features=cfg.lexical.max_features)
        yield FoldFit(t, test, rows, lex.features([t.ids[i] for i in rows]), lex.features([t.ids[i] for i in test]),
                      meta)


def cached_embedding(run: Path, rows: int) -> np.ndarray:
    """The run's frozen request vectors (training.features' cache), one per table row."""
    import torch

    files = sorted((run / "cache").glob("features-*.pt"))
    if len(files) != 1:
        raise SystemExit(f"{run / 'cache'}: expected one features-*.pt (a frozen-mode run), found {len(files)}")
    emb = torch.load(files[0], weights_only=True).float().numpy()
    if len(emb) != rows:
        raise SystemExit(f"{files[0]}: {len(emb)} rows, the run's table has {rows}")
    return emb


def refit(run: Path, out: Path, cs: list[float], embedding: float | None = None) -> dict[str, float]:
    cfg = run_config(run)
    parts = dict(np.load(run / PARTS_FILE))
    if "category" not in parts:
        raise SystemExit(f"{run / PARTS_FILE}: no category part (the run was trained without the category branch)")
    fold = parts["fold"]
    n, m = parts["category"].shape
    new = {f"category_c{c:g}": np.full((n, m), np.nan) for c in cs}
    t0 = time.perf_counter()
    emb = None
    for ff in fold_fits(run, cfg, parts):
        t, rows, meta = ff.table, ff.rows, ff.meta
        if embedding is not None:
            emb = cached_embedding(run, len(t)) if emb is None else emb
            e = (emb - emb[rows].mean(axis=0)) / (emb[rows].std(axis=0) + 1e-6) * embedding
            meta = np.hstack([meta, e])  # extra dense inputs: the classifier treats them as metadata columns
        for c in cs:
            cat = CategoryModel.fit(ff.x, meta[rows], [t.categories[i] for i in rows], t.y[rows], t.mask[rows], c=c,
                                    prior_rows=cfg.category.prior_rows)
            new[f"category_c{c:g}"][ff.test] = cat.logits(ff.x_test, meta[ff.test])
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / PARTS_FILE, **parts, **new)
    for name in LINKED:
        link = out / name
        if not link.exists():
            link.symlink_to((run / name).resolve())
    done = fold >= 0
    key = f"category_c{cfg.category.c:g}"
    check = float(np.nanmax(np.abs(new[key][done] - parts["category"][done]))) if key in new else float("nan")
    return {"seconds": time.perf_counter() - t0, "max_abs_diff_at_run_c": check}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--c", default="1,10,100", help="comma-separated classifier Cs")
    ap.add_argument("--embedding", type=float, default=None, metavar="SCALE",
                    help="also feed the frozen request vector, standardised × SCALE (a lever; see the docstring)")
    a = ap.parse_args(argv)
    res = refit(a.run, a.out, [float(c) for c in a.c.split(",")], a.embedding)
    print(f"{a.out / PARTS_FILE}: {res['seconds']:.0f} s; the run's C reproduces its stored logits to "
          f"max |Δ| = {res['max_abs_diff_at_run_c']:.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])
