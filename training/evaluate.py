"""Held-out numbers from the cross-validation predictions: per-model AUC, ECE, reliability, the OOF table.

Called by training/recipe.py; `held_out_metrics` decides per model whether the
temperature fitted on each fold's validation split lowers held-out ECE, and
only then is a temperature kept (in the OOF probabilities and in router.json).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from training.calibration import ece, plot_reliability, reliability_curve, roc_auc, sigmoid


def _rows(recipe, j: int) -> np.ndarray:
    return (recipe.oof_fold >= 0) & recipe.table.mask[:, j]


def held_out_metrics(recipe, temperature_scaling: bool) -> dict[str, Any]:
    per_model = {}
    for j, m in enumerate(recipe.models):
        r = _rows(recipe, j)
        y, z = recipe.table.y[r, j], recipe.oof_logits[r, j]
        p_raw, p_cal = sigmoid(z), sigmoid(z / recipe.oof_temps[r, j])
        e_raw, e_cal = ece(y, p_raw), ece(y, p_cal)
        helps = bool(temperature_scaling and e_cal < e_raw)
        p = p_cal if helps else p_raw
        per_model[m] = {
            "n": int(r.sum()), "base_rate": float(y.mean()) if len(y) else math.nan, "auc": roc_auc(y, p),
            "ece": ece(y, p), "ece_uncalibrated": e_raw, "ece_temperature": e_cal, "temperature_helps": helps,
            "brier": float(np.mean((p - y) ** 2)) if len(y) else math.nan, "reliability": reliability_curve(y, p),
        }
    aucs = [v["auc"] for v in per_model.values() if not math.isnan(v["auc"])]
    return {
        "mode": recipe.cfg.mode, "backbone": recipe.cfg.backbone.name, "folds": recipe.cfg.folds,
        "folds_run": int(recipe.oof_fold.max() + 1), "n_examples": len(recipe.table),
        "macro_auc": float(np.mean(aucs)) if aucs else math.nan,
        "macro_ece": float(np.mean([v["ece"] for v in per_model.values()])),
        "per_model": per_model,
    }


def oof_probabilities(recipe) -> np.ndarray:
    """[n, n_models]: each held-out prediction, with its fold's temperature where temperature helps."""
    helps = np.array([recipe.metrics["per_model"][m]["temperature_helps"] for m in recipe.models])
    z = np.where(helps[None, :], recipe.oof_logits / recipe.oof_temps, recipe.oof_logits)
    return sigmoid(z)


def oof_frame(recipe) -> pd.DataFrame:
    """Long table: example_id, fold, model, prob, prob_uncalibrated, correct (NA where unlabelled)."""
    t, keep = recipe.table, recipe.oof_fold >= 0
    p, p_raw = oof_probabilities(recipe), sigmoid(recipe.oof_logits)
    frames = []
    for j, m in enumerate(recipe.models):
        correct = pd.array(np.where(t.mask[:, j], t.y[:, j] > 0.5, False), dtype="boolean")
        correct[~t.mask[:, j]] = pd.NA
        frames.append(pd.DataFrame({
            "example_id": np.asarray(t.example_ids)[keep], "fold": recipe.oof_fold[keep], "model": m,
            "prob": p[keep, j], "prob_uncalibrated": p_raw[keep, j], "correct": correct[keep],
        }))
    return pd.concat(frames, ignore_index=True)


def plot_oof(recipe, path: str | Path) -> Path:
    p = oof_probabilities(recipe)
    curves = {m: (recipe.table.y[_rows(recipe, j), j], p[_rows(recipe, j), j]) for j, m in enumerate(recipe.models)}
    return plot_reliability(curves, path)


def write_json(path: str | Path, obj: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # NaN is not JSON: an AUC with a single class is written as null.
    path.write_text(json.dumps(_clean(obj), indent=2, default=str))
    return path


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        return _clean(obj.item())
    return obj
