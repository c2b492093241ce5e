"""Add one model to a trained router without retraining it: a new single-logit head on the frozen encoder.

    switchcraft train --config configs/train.yaml --add-model open-mistral-nemo-2407-FC-Auto

The router's encoder (fine-tuned or not) stays as it is and so do the
existing heads, the lexical branch (it blends only the models it was trained
with) and the metadata scaling; features of the new model's
labelled requests are computed once (cached), a k-fold CV of the new head
gives its held-out AUC/ECE, then the head is trained on all of them and
appended to the router (pool order: old models, then the new one).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from data.errors import DataError
from data.pool import load_pool
from training.calibration import ece, fit_temperature, roc_auc, sigmoid
from training.config import TrainConfig
from training.dataset import build_table, make_loader
from training.features import cached_features
from training.fit import fit, predict_logits, torch_threads
from training.folds import grouped_folds, grouped_split
from training.model import Head
from training.recipe import cost_profile, load_training_data
from training.router import load_router, save_router


class HeadOnly(nn.Module):
    """A head on cached features, shaped like RouterModel's forward for the training loop."""

    def __init__(self, head: Head) -> None:
        super().__init__()
        self.head = head

    def forward(self, metadata: torch.Tensor, features: torch.Tensor, **_) -> torch.Tensor:
        return self.head(torch.cat([features, metadata.to(features.dtype)], dim=-1))


def add_model(cfg: TrainConfig, name: str, router_dir: str | Path | None = None) -> dict:
    """Train and append a head for `name`; returns its held-out metrics."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    t0 = time.perf_counter()
    router_dir = Path(router_dir or cfg.router_dir)
    router = load_router(router_dir)
    if name in router.models:
        raise DataError(f"model {name!r} is already routed", path=router_dir / "router.json",
                        hint="train a new router to change an existing model's head")
    pool = load_pool(cfg.pool)
    if name not in pool.names:
        raise DataError(f"model {name!r} is not in the pool", path=cfg.pool,
                        hint=f"add it to the pool file first; pool: {', '.join(pool.names)}")
    prices = pool.get(name).prices.model_dump(exclude_none=True)
    examples, labels = load_training_data(cfg, [name])
    table = build_table(examples, labels, [name], router.tokenizer, router.packing)
    meta = router.scaler.transform(table.meta_raw)  # the router's scaling: serving computes exactly this
    model = router.model
    pad = router.tokenizer.pad_token_id or 0
    key = {"router": str(router_dir.resolve()), "saved": router.info.get("saved"), "heads": model.head_sizes}
    feats, _ = cached_features(model, table, cache_dir=Path(cfg.run_dir) / "cache", key_parts=key,
                               batch_size=cfg.frozen.feature_batch_size, pad_id=pad, progress=cfg.progress)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    s = cfg.frozen

    def train_head(tr: np.ndarray, va: np.ndarray, seed: int):
        """(head, temperature fitted on va, logits function of that head)."""
        set_seed(seed)
        head = Head(model.feature_size + model.n_meta, model.head_hidden, 1, model.dropout)
        net = HeadOnly(head)
        mk = lambda idx, shuffle: make_loader(table, idx, meta, batch_size=s.batch_size, shuffle=shuffle,
                                              seed=seed, pad_id=pad, features=feats)
        with torch_threads(cfg.num_threads or 1):  # see TrainRecipe.fit_one: a head trains fastest on one thread
            fit(net, [{"params": list(head.parameters()), "lr": s.head_lr}], mk(tr, True), mk(va, False),
                epochs=s.epochs, patience=s.patience, warmup_ratio=cfg.warmup_ratio, weight_decay=cfg.weight_decay,
                accelerator=accelerator, progress=cfg.progress, desc=f"head {name}")
        rows, z = predict_logits(net, mk(va, False), accelerator)
        temp = fit_temperature(z[:, 0], table.y[rows, 0]) if cfg.temperature_scaling else 1.0
        accelerator.free_memory()
        return head, temp, (lambda idx: _logits(net, mk(idx, False), accelerator, idx))

    fold = grouped_folds(table.groups, cfg.folds, cfg.seed)
    oof, oof_t = np.full(len(table), np.nan), np.ones(len(table))
    for f in range(cfg.max_folds or cfg.folds):
        test = np.flatnonzero(fold == f)
        tr, va = grouped_split(table.groups, np.flatnonzero(fold != f), cfg.val_fraction, cfg.seed + f)
        _, temp, logits = train_head(tr, va, cfg.seed + f)
        oof[test], oof_t[test] = logits(test), temp
    done = ~np.isnan(oof)
    y = table.y[done, 0]
    e_raw, e_cal = ece(y, sigmoid(oof[done])), ece(y, sigmoid(oof[done] / oof_t[done]))
    helps = bool(cfg.temperature_scaling and e_cal < e_raw)
    tr, va = grouped_split(table.groups, np.arange(len(table)), cfg.val_fraction, cfg.seed + 1000)
    head, temp, _ = train_head(tr, va, cfg.seed + 1000)

    model.heads.append(head)
    info = dict(router.info)
    info["models"] = [*router.models, name]
    info["prices"] = {**router.prices, name: prices}
    info["cost_profile"] = {**router.cost_profile, **cost_profile(table, np.arange(len(table)))}
    info["temperatures"] = {**(info.get("temperatures") or {}), name: temp if helps else 1.0}
    metrics = {"model": name, "n": int(done.sum()), "base_rate": float(y.mean()), "auc": roc_auc(y, sigmoid(oof[done])),
               "ece": min(e_raw, e_cal) if helps else e_raw, "ece_uncalibrated": e_raw, "temperature_helps": helps,
               "seconds": time.perf_counter() - t0}
    info["added_models"] = [*(info.get("added_models") or []), metrics]
    for k in ("format", "head", "versions", "saved"):
        info.pop(k, None)
    # The lexical branch covers the models it was trained with; the new one is the new head's logit alone.
    save_router(router_dir, model, router.tokenizer, info, lexical=router.lexical, category=router.category)
    return metrics


def _logits(net, loader, accelerator, idx) -> np.ndarray:
    rows, z = predict_logits(net, loader, accelerator)
    pos = {r: k for k, r in enumerate(np.asarray(idx))}
    out = np.empty(len(idx))
    out[[pos[r] for r in rows]] = z[:, 0]
    return out
