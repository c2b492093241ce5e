"""The training recipe: grouped k-fold CV for honest held-out numbers, then the router trained on everything.

    switchcraft train --config configs/train.yaml                    # frozen MiniLM, 5-fold
    switchcraft train --config configs/train.yaml mode=finetune      # the whole encoder trains

    recipe = TrainRecipe(cfg); recipe.setup(); recipe.train(); recipe.save(); recipe.cleanup()

Writes, under the run dir: `oof_predictions.parquet` (example_id, fold, model,
prob, …: every example predicted by the fold model that never saw its query),
`oof_parts.npz` (each part's held-out logits: head, lexical, category),
and the router folder (`<run_dir>/router/` by default) with the weights,
`router.json`, `metrics.json` and `reliability.png`.

Each model (fold or final) is the head (trained on the pool's labels plus,
as extra targets dropped afterwards, the other recorded models' labels:
`aux`) blended with the lexical branch (`lexical`, fitted on the same
training rows): logit = (1 - w)·head + w·lexical; with the category branch
(`category`, training/category.py), that blend (1 - wc)·it + wc·category, wc = `category.weight`.
Temperatures, when asked for, are fitted on the blend. docs/router.md has the held-out numbers of each part.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from data.errors import DataError
from data.pool import load_pool
from data.schema import read_examples, read_labels
from training.category import CategoryModel, blend
from training.config import TrainConfig
from training.dataset import RequestTable, build_table, make_loader
from training.evaluate import held_out_metrics, oof_frame, plot_oof, write_json
from training.fit import FitResult
from training.folds import grouped_folds, grouped_split
from training.lexical import LexicalModel
from training.metadata import FEATURE_NAMES, MetadataScaler
from training.model import RouterModel, load_backbone
from training.novelty import Novelty
from training.packing import special_ids

OOF_FILE = "oof_predictions.parquet"
PARTS_FILE = "oof_parts.npz"


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


@dataclass
class Fitted:
    """One trained model: the head (pool outputs only), its scaler, the lexical branch, and a logits function."""

    model: RouterModel
    scaler: MetadataScaler
    result: FitResult
    lexical: LexicalModel | None
    head_logits: Callable[[np.ndarray], np.ndarray]  # rows -> [len(rows), n_models], the head alone
    lexical_logits: Callable[[np.ndarray], np.ndarray] | None  # the lexical branch alone
    category: CategoryModel | None = None
    category_inputs: Callable[[np.ndarray], tuple] | None = None  # rows -> (their TF-IDF, scaled metadata)

    def category_logits(self, idx: np.ndarray) -> np.ndarray:
        """The category branch alone."""
        return self.category.logits(*self.category_inputs(idx))

    def logits(self, idx: np.ndarray) -> np.ndarray:
        """What the router computes for rows idx (before temperature)."""
        z = self.head_logits(idx)
        if self.lexical is None:
            return z
        z = blend(z, self.lexical_logits(idx), self.lexical.weight)
        if self.category is None:
            return z
        return blend(z, self.category_logits(idx), self.category.weight)


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
        self.train_table, self.label_weights, self.aux_models = self._with_aux(examples, pool)
        self.fold = grouped_folds(self.table.groups, cfg.folds, cfg.seed)
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
        self.timing["setup_s"] = time.perf_counter() - t0
        self.features = None
        if cfg.mode == "frozen":
            self.features = self._features()

    def _with_aux(self, examples, pool):
        """(table the head trains on, per-column loss weights for training and for validation, extra model names).

        The extra columns (other recorded models, `aux`) count in training only: early stopping and
        temperatures look at the pool's labels alone.
        """
        t0, n = time.perf_counter(), len(self.models)
        path = self.cfg.aux_outputs
        if path is None or self.cfg.aux.weight == 0:
            return self.table, None, []
        from data.schema import read_outputs
        from training.aux_targets import aux_targets

        if not path.exists():
            raise DataError("aux outputs file not found", path=path, field="aux.outputs",
                            hint="make it with: switchcraft import-outputs, or set aux.outputs=null")
        exclude = set(self.models) | {pool.get(m).recording for m in self.models}
        aux = aux_targets(read_outputs(path), {e.id: e for e in examples}, exclude=exclude,
                          example_ids=self.table.example_ids)
        self.timing["aux_labels_s"] = time.perf_counter() - t0
        if not len(aux):
            return self.table, None, []
        table = replace(self.table, y=np.concatenate([self.table.y, aux.y], axis=1),
                        mask=np.concatenate([self.table.mask, aux.mask], axis=1))
        train_w = np.r_[np.ones(n), np.full(len(aux), self.cfg.aux.weight)]
        val_w = np.r_[np.ones(n), np.zeros(len(aux))]
        return table, (train_w, val_w), aux.models

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
        n_out = len(self.models) + len(self.aux_models)
        model = RouterModel(encoder, len(FEATURE_NAMES), n_out, pooling=self.cfg.backbone.pooling,
                            head_hidden=self.cfg.head_hidden, dropout=self.cfg.dropout, sep_token_id=self.sep_id)
        encoder.requires_grad_(not frozen)
        return model

    def fit_one(self, train_idx: np.ndarray, val_idx: np.ndarray, seed: int, desc: str) -> Fitted:
        """The head trained on train_idx (early-stopped on val_idx), and the lexical and category branches
        (train_idx, + val_idx when no temperature is fitted on it)."""
        from training.fit import balanced_pos_weight, torch_threads

        cfg, t = self.cfg, self.train_table
        scaler = MetadataScaler.fit(t.meta_raw[train_idx])  # scaling from the training rows only
        meta = scaler.transform(t.meta_raw)
        model = self._new_model(seed)
        s = cfg.frozen if cfg.mode == "frozen" else cfg.finetune
        groups = [{"params": list(model.heads.parameters()), "lr": s.head_lr}]
        if cfg.mode == "finetune":
            groups.append({"params": list(model.encoder.parameters()), "lr": cfg.finetune.lr})
        train_w, val_w = self.label_weights or (None, None)
        loader = lambda idx, shuffle, w: make_loader(
            t, idx, meta, batch_size=s.batch_size, shuffle=shuffle, seed=seed, pad_id=self.pad_id, features=self.features,
            label_weights=w,
        )
        pos_weight = balanced_pos_weight(t.y[train_idx], t.mask[train_idx]) if cfg.pos_weight == "balanced" else None
        # A head-only step is a few small matmuls: thread hand-offs cost more than they save (measured 8x
        # slower with 2 threads than 1 on a loaded 2-core machine), so frozen mode trains on one thread.
        with torch_threads(cfg.num_threads or (1 if cfg.mode == "frozen" else None)):
            result = self._fit(model, groups, loader(train_idx, True, train_w), loader(val_idx, False, val_w), s,
                               pos_weight, desc)
        if self.aux_models:
            model.keep_outputs(len(self.models))  # the extra targets were for training only
        self.accelerator.free_memory()
        # The validation rows stay out of the lexical branch only when a temperature is fitted on them.
        fit_rows = train_idx if cfg.temperature_scaling else np.concatenate([train_idx, val_idx])
        lexical = self._fit_lexical(fit_rows)
        lex_logits, cat = None, None
        if lexical is not None:
            lex_logits = lambda idx: lexical.logits([self.table.ids[i] for i in idx])
            cat = self._fit_category(lexical, meta, fit_rows)
        inputs = lambda idx: (lexical.features([self.table.ids[i] for i in idx]), meta[idx])
        return Fitted(model, scaler, result, lexical, lambda idx: self._logits(model, meta, idx, s.batch_size), lex_logits,
                      cat, inputs)

    def _fit_category(self, lexical: LexicalModel, meta: np.ndarray, rows: np.ndarray) -> CategoryModel | None:
        """The category branch on `rows` (their categories are its targets; nothing else of a category is kept)."""
        cc, t = self.cfg.category, self.table
        if not cc.enabled or t.categories is None:
            return None
        t0 = time.perf_counter()
        x, cats = lexical.features([t.ids[i] for i in rows]), [t.categories[i] for i in rows]
        out = CategoryModel.fit(x, meta[rows], cats, t.y[rows], t.mask[rows], c=cc.c, prior_rows=cc.prior_rows,
                                weight=cc.weight)
        self.timing["category_s"] = self.timing.get("category_s", 0.0) + time.perf_counter() - t0
        return out

    def _fit_lexical(self, train_idx: np.ndarray) -> LexicalModel | None:
        lx = self.cfg.lexical
        if not lx.enabled:
            return None
        t0 = time.perf_counter()
        lexical = LexicalModel.fit(
            [self.table.ids[i] for i in train_idx], self.table.y[train_idx], self.table.mask[train_idx],
            special_ids=self.tokenizer.all_special_ids, vocab_size=self._vocab_size(), buckets=lx.buckets,
            min_df=lx.min_df, max_features=lx.max_features, c=lx.c, weight=lx.weight,
        )
        self.timing["lexical_s"] = self.timing.get("lexical_s", 0.0) + time.perf_counter() - t0
        return lexical

    def _vocab_size(self) -> int:
        # Every id the packing can emit indexes the encoder's embeddings, so that many unigram keys suffice.
        return max(int(self.encoder.config.vocab_size), len(self.tokenizer))

    def _fit(self, model, groups, train_loader, val_loader, s, pos_weight, desc):
        from training.fit import fit

        cfg = self.cfg
        return fit(
            model, groups, train_loader, val_loader, epochs=s.epochs, patience=s.patience,
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
        self.oof_parts: dict[str, np.ndarray] = {}  # each part's held-out logits, for metrics.json
        self.oof_temps = np.ones((n, len(self.models)))
        self.oof_fold = np.full(n, -1)
        self.category_accuracy: list[tuple[int, int]] = []  # (right, rows) of the category branch per test fold
        hits: list[tuple[int, int] | None] = []  # per fold: (right, rows) of the category guess
        val_parts: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []  # per fold: its validation rows' parts
        for f in range(cfg.max_folds or cfg.folds):
            t0 = time.perf_counter()
            test = np.flatnonzero(self.fold == f)
            tr, va = grouped_split(t.groups, np.flatnonzero(self.fold != f), cfg.val_fraction, cfg.seed + f)
            fitted = self.fit_one(tr, va, cfg.seed + f, desc=f"fold {f + 1}/{cfg.folds}")
            parts = {"head": fitted.head_logits} | ({"lexical": fitted.lexical_logits} if fitted.lexical else {})
            parts |= {"category": fitted.category_logits} if fitted.category is not None else {}
            hits.append(self._category_accuracy(fitted, test) if fitted.category is not None else None)
            for name, fn in parts.items():
                self.oof_parts.setdefault(name, np.full((n, len(self.models)), np.nan))[test] = fn(test)
            val_parts.append((va, {name: fn(va) for name, fn in parts.items()}))
            self.oof_fold[test] = f
            self.fold_records.append({
                "fold": f, "n_train": len(tr), "n_val": len(va), "n_test": len(test),
                "best_epoch": fitted.result.best_epoch, "epochs_run": fitted.result.epochs_run,
                "best_val_loss": fitted.result.best_val_loss, "train_seconds": fitted.result.train_seconds,
                "train_examples_per_s": fitted.result.examples_per_s,
                "fold_seconds": time.perf_counter() - t0, "cost_profile": cost_profile(t, np.concatenate([tr, va])),
            })
            del fitted
            gc.collect()
        # The blend of the parts at the configured weights; temperatures fitted on it.
        wc = float(cfg.category.weight) if "category" in self.oof_parts else None
        for f, (va, vp) in enumerate(val_parts):
            test = np.flatnonzero(self.oof_fold == f)
            self.oof_logits[test] = self._blend(self.oof_parts, test, wc)
            z_val = self._blend(vp, slice(None), wc)
            temps = np.array([fit_temperature(z_val[t.mask[va, j], j], t.y[va, j][t.mask[va, j]])
                              for j in range(len(self.models))])
            self.oof_temps[test] = temps
            self.fold_records[f]["temperatures"] = dict(zip(self.models, temps.tolist()))
            if wc is not None:
                self.category_accuracy.append(hits[f])
        self.metrics = held_out_metrics(self, cfg.temperature_scaling)
        self.metrics["parts"] = self._parts_metrics()
        if cfg.final_fit:
            t0 = time.perf_counter()
            tr, va = grouped_split(t.groups, np.arange(n), cfg.val_fraction, cfg.seed + 1000)
            fitted = self.fit_one(tr, va, cfg.seed + 1000, desc="final")
            z_val = fitted.logits(va)
            temps = {m: (fit_temperature(z_val[t.mask[va, j], j], t.y[va, j][t.mask[va, j]])
                         if self.metrics["per_model"][m]["temperature_helps"] else 1.0)
                     for j, m in enumerate(self.models)}
            self.final = (fitted, temps)
            self.timing["final_fit_s"] = time.perf_counter() - t0

    def _blend(self, parts: dict[str, np.ndarray], rows, wc: float | None) -> np.ndarray:
        """`Fitted.logits` from stored parts: head ⊕ lexical, then the category branch at weight `wc`."""
        z = parts["head"][rows]
        if "lexical" in parts:
            z = blend(z, parts["lexical"][rows], self.cfg.lexical.weight)
        return z if wc is None else blend(z, parts["category"][rows], wc)

    def _category_accuracy(self, fitted: Fitted, test: np.ndarray) -> tuple[int, int]:
        """How often the category branch's most probable category is the test row's (a diagnostic)."""
        t, cat = self.table, fitted.category
        p = cat.category_probs(*fitted.category_inputs(test))
        guess = [cat.categories[k] for k in p.argmax(axis=1)]
        return sum(g == t.categories[i] for g, i in zip(guess, test)), len(test)

    def _parts_metrics(self) -> dict:
        """Held-out macro AUC of each part alone (raw logits), and what the blend was made of."""
        from training.calibration import roc_auc

        t, done = self.table, self.oof_fold >= 0

        def macro(z):
            aucs = [roc_auc(t.y[done & t.mask[:, j], j], z[done & t.mask[:, j], j]) for j in range(len(self.models))]
            return float(np.nanmean(aucs))

        out = {name: {"macro_auc": macro(z)} for name, z in self.oof_parts.items()}
        out["aux_models"] = len(self.aux_models)
        out["aux_weight"] = self.cfg.aux.weight if self.aux_models else 0.0
        out["lexical_weight"] = self.cfg.lexical.weight if self.cfg.lexical.enabled else 0.0
        out["category_weight"] = self.cfg.category.weight if self.category_accuracy else 0.0
        if self.category_accuracy:
            out["category_c"] = float(self.cfg.category.c)
            right, rows = map(sum, zip(*self.category_accuracy))
            out["category_accuracy"] = right / rows  # held out: the branch's guess of BFCL's category
        return out

    def save(self) -> Path:
        from training.router import save_router

        cfg, out = self.cfg, self.cfg.router_dir
        run = Path(cfg.run_dir)
        run.mkdir(parents=True, exist_ok=True)
        oof_frame(self).to_parquet(run / OOF_FILE, index=False)
        # Each part's held-out logits (head, lexical, category), for measuring blends without retraining.
        np.savez_compressed(run / PARTS_FILE, example_ids=np.asarray(self.table.example_ids), fold=self.oof_fold,
                            models=np.asarray(self.models), **self.oof_parts)
        if self.final is not None:
            fitted, temps = self.final
            model, scaler = fitted.model, fitted.scaler
            novelty = Novelty.fit(self.table.ids, scaler.transform(self.table.meta_raw), self.fold,
                                  safe_model=safe_model(self.table))
            save_router(out, model, self.tokenizer, {
                "models": self.models, "prices": self.prices, "cost_profile": cost_profile(self.table, np.arange(len(self.table))),
                "cost_profile_basis": "mean cost_usd per query over all training examples (labels)",
                "threshold": cfg.threshold, "temperatures": temps, "packing": cfg.packing.model_dump(),
                "metadata": scaler.to_json(), "mode": cfg.mode, "backbone": cfg.backbone.model_dump(),
                "n_examples": len(self.table), "config": cfg.model_dump(), "added_models": [],
                "aux_models": self.aux_models, "novelty": novelty.info(),
            }, lexical=fitted.lexical, category=fitted.category)
            novelty.save(out)
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


def safe_model(table: RequestTable) -> str:
    """The most accurate single model on the training labels (ties: the cheaper): where a request unlike the
    training requests goes (training/novelty.py)."""
    seen = table.mask.sum(axis=0)
    acc = np.where(seen > 0, (table.y * table.mask).sum(axis=0) / np.maximum(seen, 1), -1.0)
    cost = np.nan_to_num(np.nanmean(np.where(table.mask, table.cost, np.nan), axis=0), nan=np.inf)
    return table.models[int(np.lexsort((cost, -acc))[0])]


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
