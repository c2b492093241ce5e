"""The report's plots: every headline row with its intervals, and the τ and λ sweeps (matplotlib, Agg backend:
reports are files)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display here, and reports are files
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from evaluation.report.evaluate import ROUTER, STRATEGIES, Evaluation  # noqa: E402


def plot_strategies(ev: Evaluation, head: pd.DataFrame, path: Path) -> Path:
    """Every headline row at its held-out cost and accuracy, with both 95% intervals."""
    fig, ax = plt.subplots(figsize=(13, 6))
    for m, o in ev.refs.singles.items():
        ax.scatter([o.usd_per_million], [o.accuracy], marker="o", s=24, color="lightgrey", zorder=2)
        ax.annotate(m, (o.usd_per_million, o.accuracy), fontsize=6, color="grey", xytext=(3, 2), textcoords="offset points")
    styles = [(STRATEGIES, "tab:red", "*", 170), ("best fixed strategy", "tab:orange", "P", 80), (ROUTER, "tab:blue", "o", 50),
              ("TF-IDF", "tab:green", "s", 40), ("kNN", "tab:olive", "v", 40), ("category prior", "tab:purple", "d", 40),
              ("best single", "black", "o", 70), ("oracle", "black", "D", 60), ("cheapest", "grey", "o", 50)]
    for r in head.dropna(subset=["accuracy_ci_low"]).to_dict(orient="records"):
        color, marker, size = next(((c, mk, sz) for key, c, mk, sz in styles if r["routing"].startswith(key)), ("grey", ".", 30))
        x, y = r["usd_per_million"], r["accuracy"]
        ax.errorbar([x], [y], xerr=[[x - r["usd_per_million_ci_low"]], [r["usd_per_million_ci_high"] - x]],
                    yerr=[[y - r["accuracy_ci_low"]], [r["accuracy_ci_high"] - y]], fmt="none", ecolor=color, alpha=0.35, lw=1)
        ax.scatter([x], [y], marker=marker, s=size, color=color, zorder=4, label=r["routing"])
    best = head[head["routing"] == "best single model"].iloc[0]
    ax.axhline(best["accuracy"], color="black", lw=0.7, ls=":")
    ax.axvline(0.2 * best["usd_per_million"], color="tab:red", lw=0.7, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("mean cost, USD per million queries (log); dotted: 20% of the best single model's")
    ax.set_ylabel("accuracy (held-out); dotted: the best single model's")
    ax.set_title("Every routing row, held-out, with 95% bootstrap intervals")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_curves(ev: Evaluation, kind: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, r in ev.routers.items():
        pts = r.curve if kind == "tau" else r.lambda_curve
        ax.plot([c * 1e6 for _, c, _ in pts], [a for _, _, a in pts], marker=".", ms=3, lw=1.2, label=f"{name} ({kind} sweep)")
        ax.scatter([r.outcome.usd_per_million], [r.outcome.accuracy], marker="*", s=160, zorder=5,
                   label=f"{name} @ τ for best-single accuracy")
    for m, o in ev.refs.singles.items():
        ax.scatter([o.usd_per_million], [o.accuracy], marker="o", s=28, color="grey")
        ax.annotate(m, (o.usd_per_million, o.accuracy), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.scatter([ev.refs.oracle.usd_per_million], [ev.refs.oracle.accuracy], marker="D", s=60, color="black", label="oracle")
    ax.set_xscale("log")
    ax.set_xlabel("mean cost, USD per million queries (log)")
    ax.set_ylabel("accuracy (held-out)")
    ax.set_title(f"Cost vs accuracy, {'threshold τ' if kind == 'tau' else 'λ (RouterBench)'} sweep")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
