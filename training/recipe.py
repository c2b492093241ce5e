"""The training recipe: grouped k-fold CV for honest held-out numbers, then the router trained on everything.

    switchcraft train --config configs/train.yaml                    # frozen MiniLM, 5-fold
    switchcraft train --config configs/train.yaml mode=finetune      # the whole encoder trains

    recipe = TrainRecipe(cfg); recipe.setup(); recipe.train(); recipe.save(); recipe.cleanup()

Writes, under the run dir: `oof_predictions.parquet` (example_id, fold, model,
prob, …: every example predicted by the fold model that never saw its query),
and the router folder (`<run_dir>/router/` by default) with the weights,
`router.json`, `metrics.json` and `reliability.png`.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np

from data.errors import DataError
from data.pool import load_pool
from data.schema import read_examples, read_labels
from training.config import TrainConfig
from training.dataset import RequestTable, build_table, make_loader
from training.evaluate import held_out_metrics, oof_frame, plot_oof, write_json
from training.folds import grouped_folds, grouped_split
from training.metadata import FEATURE_NAMES, MetadataScaler
from training.model import RouterModel, load_backbone
from training.packing import special_ids

OOF_FILE = "oof_predictions.parquet"


def load_training_data(cfg: TrainConfig, models: list[str]):
    """(examples, labels) for the configured models, with errors that say which command makes what is missing."""
    try:
        labels = read_labels(cfg.labels)
    except FileNotFoundError:
        raise DataError("labels file not found", path=cfg.labels, hint="make it with: switchcraft label --pool configs/pool.yaml") from None
    have = {lab.model for lab in labels}
    missing = [m for m in models if m not in have]
    if missing:
        raise DataError(f"no labels for model(s) {missing}", path=cfg.labels, hint="label them, or leave them out with models=[...]")
    if cfg.examples:
        examples = read_examples(cfg.examples)
    else:
        from data.sources import read_source

        examples = read_source(cfg.source, cfg.source_path)
    if cfg.max_examples and len(examples) > cfg.max_examples:
        pick = np.random.default_rng(cfg.seed).choice(len(examples), cfg.max_examples, replace=False)
        examples = [examples[i] for i in sorted(pick)]
    return examples, labels


def cost_profile(table: RequestTable, idx: np.ndarray) -> dict[str, float | None]:
    """Mean real cost of one query per model over `idx` (unknown costs left out)."""
    out = {}
    for j, m in enumerate(table.models):
        c = table.cost[idx, j]
        c = c[~np.isnan(c)]
        out[m] = float(c.mean()) if len(c) else None
    return out


class TrainRecipe:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.timing: dict[str, float] = {}
        self.fold_records: list[dict] = []
        self.final = None

    # --- setup ---------------------------------------------------------------
    def setup(self) -> None:
        import torch
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        cfg, t0 = self.cfg, time.perf_counter()
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        set_seed(cfg.seed)
        pool = load_pool(cfg.pool)
        self.models = cfg.models or pool.names
        unknown = [m for m in self.models if m not in pool.names]
        if unknown:
            raise DataError(f"model(s) {unknown} are not in the pool", path=cfg.pool, field="models",
                            hint=f"pool: {', '.join(pool.names)}")
        self.prices = {m: pool.get(m).prices.model_dump(exclude_none=True) for m in self.models}
        examples, labels = load_training_data(cfg, self.models)
        self.encoder, self.tokenizer = load_backbone(cfg.backbone)
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.sep_id = special_ids(self.tokenizer)[1]
        self.table = build_table(examples, labels, self.models, self.tokenizer, cfg.packing)
        self.fold = grouped_folds(self.table.groups, cfg.folds, cfg.seed)
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
        self.timing["setup_s"] = time.perf_counter() - t0
        self.features = None
        if cfg.mode == "frozen":
            self.features = self._features()

    def _features(self):
        from training.features import cached_features

        t0 = time.perf_counter()
        probe = RouterModel(self.encoder, len(FEATURE_NAMES), len(self.models), pooling=self.cfg.backbone.pooling,
                            sep_token_id=self.sep_id)
        probe.to(self.accelerator.device)
        key = {"backbone": self.cfg.backbone.model_dump(), "encoder": self.encoder.config.to_dict(),
               "packing": self.cfg.packing.model_dump()}
        feats, hit = cached_features(
            probe, self.table, cache_dir=Path(self.cfg.run_dir) / "cache", key_parts=key,
            batch_size=self.cfg.frozen.feature_batch_size, pad_id=self.pad_id, progress=self.cfg.progress,
        )
        self.timing["features_s"] = time.perf_counter() - t0
        self.timing["features_cached"] = hit
        return feats

    # --- one model -----------------------------------------------------------
    def _new_model(self, seed: int) -> RouterModel:
        import copy

        from accelerate.utils import set_seed

        set_seed(seed)
        frozen = self.cfg.mode == "frozen"
        # Fine-tuning changes the encoder: each fold starts from the same pretrained copy.
        encoder = self.encoder if frozen else copy.deepcopy(self.encoder)
        model = RouterModel(encoder, len(FEATURE_NAMES), len(self.models), pooling=self.cfg.backbone.pooling,
                            head_hidden=self.cfg.head_hidden, dropout=self.cfg.dropout, sep_token_id=self.sep_id)
        encoder.requires_grad_(not frozen)
        return model

    def fit_one(self, train_idx: np.ndarray, val_idx: np.ndarray, seed: int, desc: str):
        """(model, scaler, FitResult, logits(idx) function): trained on train_idx, early-stopped on val_idx."""
        from training.fit import balanced_pos_weight, torch_threads

        cfg, t = self.cfg, self.table
        scaler = MetadataScaler.fit(t.meta_raw[train_idx])  # scaling from the training rows only
        meta = scaler.transform(t.meta_raw)
        model = self._new_model(seed)
        s = cfg.frozen if cfg.mode == "frozen" else cfg.finetune
        groups = [{"params": list(model.heads.parameters()), "lr": s.head_lr}]
        if cfg.mode == "finetune":
            groups.append({"params": list(model.encoder.parameters()), "lr": cfg.finetune.lr})
        loader = lambda idx, shuffle: make_loader(
            t, idx, meta, batch_size=s.batch_size, shuffle=shuffle, seed=seed, pad_id=self.pad_id, features=self.features
        )
        pos_weight = balanced_pos_weight(t.y[train_idx], t.mask[train_idx]) if cfg.pos_weight == "balanced" else None
        # A head-only step is a few small matmuls: thread hand-offs cost more than they save (measured 8x
        # slower with 2 threads than 1 on a loaded 2-core machine), so frozen mode trains on one thread.
        with torch_threads(cfg.num_threads or (1 if cfg.mode == "frozen" else None)):
            result = self._fit(model, groups, loader, train_idx, val_idx, s, pos_weight, desc)
        self.accelerator.free_memory()
        return model, scaler, result, lambda idx: self._logits(model, meta, idx, s.batch_size)

    def _fit(self, model, groups, loader, train_idx, val_idx, s, pos_weight, desc):
        from training.fit import fit

        cfg = self.cfg
        return fit(
            model, groups, loader(train_idx, True), loader(val_idx, False), epochs=s.epochs, patience=s.patience,
            warmup_ratio=cfg.warmup_ratio, weight_decay=cfg.weight_decay, accelerator=self.accelerator,
            pos_weight=pos_weight, max_steps_per_epoch=getattr(s, "max_steps_per_epoch", None),
            progress=cfg.progress, step_bars=cfg.mode == "finetune", desc=desc,
        )

    def _logits(self, model, meta, idx, batch_size) -> np.ndarray:
        from training.fit import predict_logits

        loader = make_loader(self.table, idx, meta, batch_size=batch_size, shuffle=False, seed=0,
                             pad_id=self.pad_id, features=self.features)
        rows, z = predict_logits(model, loader, self.accelerator)
        out = np.empty((len(idx), z.shape[1]))
        pos = {r: k for k, r in enumerate(np.asarray(idx))}
        out[[pos[r] for r in rows]] = z
        return out

    # --- the recipe ----------------------------------------------------------
    def train(self) -> None:
        from training.calibration import fit_temperature

        cfg, t = self.cfg, self.table
        n = len(t)
        self.oof_logits = np.full((n, len(self.models)), np.nan)
        self.oof_temps = np.ones((n, len(self.models)))
        self.oof_fold = np.full(n, -1)
        for f in range(cfg.max_folds or cfg.folds):
            t0 = time.perf_counter()
            test = np.flatnonzero(self.fold == f)
            tr, va = grouped_split(t.groups, np.flatnonzero(self.fold != f), cfg.val_fraction, cfg.seed + f)
            model, _, result, logits = self.fit_one(tr, va, cfg.seed + f, desc=f"fold {f + 1}/{cfg.folds}")
            z_val = logits(va)
            temps = np.array([fit_temperature(z_val[t.mask[va, j], j], t.y[va, j][t.mask[va, j]])
                              for j in range(len(self.models))])
            self.oof_logits[test] = logits(test)
            self.oof_temps[test] = temps
            self.oof_fold[test] = f
            self.fold_records.append({
                "fold": f, "n_train": len(tr), "n_val": len(va), "n_test": len(test),
                "best_epoch": result.best_epoch, "epochs_run": result.epochs_run, "best_val_loss": result.best_val_loss,
                "train_seconds": result.train_seconds, "train_examples_per_s": result.examples_per_s,
                "fold_seconds": time.perf_counter() - t0, "temperatures": dict(zip(self.models, temps.tolist())),
                "cost_profile": cost_profile(t, np.concatenate([tr, va])),
            })
            del model
            gc.collect()
        self.metrics = held_out_metrics(self, cfg.temperature_scaling)
        if cfg.final_fit:
            t0 = time.perf_counter()
            tr, va = grouped_split(t.groups, np.arange(n), cfg.val_fraction, cfg.seed + 1000)
            model, scaler, result, logits = self.fit_one(tr, va, cfg.seed + 1000, desc="final")
            z_val = logits(va)
            temps = {m: (fit_temperature(z_val[t.mask[va, j], j], t.y[va, j][t.mask[va, j]])
                         if self.metrics["per_model"][m]["temperature_helps"] else 1.0)
                     for j, m in enumerate(self.models)}
            self.final = (model, scaler, temps, result)
            self.timing["final_fit_s"] = time.perf_counter() - t0

    def save(self) -> Path:
        from training.router import save_router

        cfg, out = self.cfg, self.cfg.router_dir
        run = Path(cfg.run_dir)
        run.mkdir(parents=True, exist_ok=True)
        oof_frame(self).to_parquet(run / OOF_FILE, index=False)
        if self.final is not None:
            model, scaler, temps, _ = self.final
            save_router(out, model, self.tokenizer, {
                "models": self.models, "prices": self.prices, "cost_profile": cost_profile(self.table, np.arange(len(self.table))),
                "cost_profile_basis": "mean cost_usd per query over all training examples (labels)",
                "threshold": cfg.threshold, "temperatures": temps, "packing": cfg.packing.model_dump(),
                "metadata": scaler.to_json(), "mode": cfg.mode, "backbone": cfg.backbone.model_dump(),
                "n_examples": len(self.table), "config": cfg.model_dump(), "added_models": [],
            })
        plot_oof(self, out / "reliability.png")
        self.metrics["timing"] = self.timing
        self.metrics["fold_details"] = self.fold_records
        write_json(out / "metrics.json", self.metrics)
        return out

    def cleanup(self) -> None:
        self.features = None
        self.final = None
        if hasattr(self, "accelerator"):
            self.accelerator.free_memory()
        gc.collect()


def run_training(cfg: TrainConfig) -> dict:
    """setup → train → save → cleanup; returns the metrics (also in <router>/metrics.json)."""
    t0 = time.perf_counter()
    recipe = TrainRecipe(cfg)
    try:
        recipe.setup()
        recipe.train()
        recipe.timing["total_s"] = time.perf_counter() - t0
        recipe.save()
        return recipe.metrics
    finally:
        recipe.cleanup()
