"""How good the probabilities are: ROC-AUC, ECE, reliability curves, and temperature scaling.

    roc_auc(y, p), ece(y, p), reliability_curve(y, p)
    t = fit_temperature(logits, y)          # p = sigmoid(logits / t)
    plot_reliability({"gpt-4o": (y, p)}, "runs/default/router/reliability.png")

The policy thresholds these probabilities, so a model whose 0.8 means 0.6
picks the wrong LLM: ECE is reported next to AUC, and a per-model temperature
is fitted on held-out logits and kept only where it lowers held-out ECE.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def roc_auc(y: np.ndarray, p: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count half); NaN if one class."""
    y = np.asarray(y, dtype=bool)
    p = np.asarray(p, dtype=np.float64)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p), dtype=np.float64)
    sorted_p = p[order]
    # Average ranks over ties (Mann-Whitney U).
    i = 0
    while i < len(p):
        j = i
        while j + 1 < len(p) and sorted_p[j + 1] == sorted_p[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def reliability_curve(y: np.ndarray, p: np.ndarray, n_bins: int = 10) -> list[dict]:
    """Equal-width bins over [0, 1]: mean predicted, observed rate, count (empty bins left out)."""
    y = np.asarray(y, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    bins = np.minimum((p * n_bins).astype(int), n_bins - 1)
    out = []
    for b in range(n_bins):
        m = bins == b
        if m.any():
            out.append({"bin": b, "mean_pred": float(p[m].mean()), "observed": float(y[m].mean()), "count": int(m.sum())})
    return out


def ece(y: np.ndarray, p: np.ndarray, n_bins: int = 10) -> float:
    """Expected calibration error: count-weighted mean |observed - predicted| over equal-width bins."""
    curve = reliability_curve(y, p, n_bins)
    n = sum(c["count"] for c in curve)
    return float(sum(c["count"] * abs(c["observed"] - c["mean_pred"]) for c in curve) / n) if n else float("nan")


def nll(logits: np.ndarray, y: np.ndarray, temperature: float = 1.0) -> float:
    z = np.asarray(logits, dtype=np.float64) / temperature
    y = np.asarray(y, dtype=np.float64)
    # log(1 + e^z) - y z, computed stably
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def fit_temperature(logits: np.ndarray, y: np.ndarray, lo: float = 0.05, hi: float = 20.0) -> float:
    """The temperature minimising NLL, by golden-section search on log T (NLL is unimodal in it)."""
    if len(np.unique(np.asarray(y))) < 2:
        return 1.0
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(60):
        if nll(logits, y, math.exp(c)) < nll(logits, y, math.exp(d)):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    return float(math.exp((a + b) / 2))


def plot_reliability(
    curves: dict[str, tuple[np.ndarray, np.ndarray]], path: str | Path, n_bins: int = 10, min_count: int = 10
) -> Path:
    """One reliability diagram, a line per model, ECE in the legend.

    Bins with fewer than `min_count` predictions are left out of the lines (a bin of two requests
    swings between 0 and 1 and hides the rest); ECE still counts them.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display here; only files
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfectly calibrated")
    for name, (y, p) in curves.items():
        pts = [c for c in reliability_curve(y, p, n_bins) if c["count"] >= min_count]
        ax.plot([c["mean_pred"] for c in pts], [c["observed"] for c in pts], marker="o", markersize=3,
                label=f"{name} (ECE {ece(y, p, n_bins):.3f})")
    ax.set_xlabel("predicted P(correct)")
    ax.set_ylabel("observed fraction correct")
    ax.set_title(f"Reliability on held-out folds (bins with ≥ {min_count} requests)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
