"""The oracle-gap report of a run: tables, plots, metrics.json, CSVs.

    switchcraft evaluate runs/default          # reads labels.parquet, oof_predictions.parquet, examples.parquet

Writes into `<run>/report/`: `report.md`, `metrics.json`, `headline.csv`,
`singles.csv`, `per_category.csv`, `curves.csv`, `cost_accuracy_tau.png`,
`cost_accuracy_lambda.png`. Definitions: docs/metrics.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display here, and reports are files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from data.schema import Example, Label  # noqa: E402
from evaluation.baselines import BASELINES, request_text  # noqa: E402
from evaluation.routing_eval import (  # noqa: E402
    References,
    RouterResult,
    RoutingData,
    curve_scores,
    evaluate_router,
    per_category,
    references,
)
from evaluation.routing_metrics import gap_closed, savings  # noqa: E402

ROUTER = "switchcraft router"


@dataclass
class Evaluation:
    data: RoutingData
    refs: References
    routers: dict[str, RouterResult]  # router and learned baselines, each at its calibrated τ
    frugal: dict[str, RouterResult]  # the same, τ calibrated for ≤ 10% of the best single model's cost
    fixed: dict[str, RouterResult]  # the router at the default τ = 0.5
    scores: dict[str, dict[str, float]]
    # The λ rule (argmax λ·p − cost, serving.policy rule="lambda"), λ calibrated for each target.
    lambda_rule: dict[str, dict[str, RouterResult]] = field(default_factory=dict)  # target → name → result


def oof_matrix(oof: pd.DataFrame, data_ids: list[str], models: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Long out-of-fold table (example_id, fold, model, prob) → (n × m probabilities, folds by id)."""
    wide = oof.pivot_table(index="example_id", columns="model", values="prob", aggfunc="first")
    missing = [m for m in models if m not in wide.columns]
    if missing:
        raise ValueError(f"out-of-fold predictions have no column for {missing}")
    folds = oof.drop_duplicates("example_id").set_index("example_id")["fold"].astype(int).to_dict()
    return wide.reindex(data_ids)[models].to_numpy(dtype=float), folds


def run_evaluation(
    labels: list[Label],
    examples: dict[str, Example],
    oof: pd.DataFrame,
    models: list[str],
    *,
    embeddings: dict[str, np.ndarray] | None = None,
    target: str = "match_best",
    budget_per_million: float | None = None,
) -> Evaluation:
    folds = oof.drop_duplicates("example_id").set_index("example_id")["fold"].astype(int).to_dict()
    folds = {e: f for e, f in folds.items() if f >= 0}
    data = RoutingData.from_labels(labels, examples, models, folds)
    probs, _ = oof_matrix(oof, data.example_ids, models)
    if np.isnan(probs).any():
        raise ValueError(f"{int(np.isnan(probs).any(axis=1).sum())} held-out rows have no router probability")
    refs = references(data)
    kw = dict(target=target, budget_per_million=budget_per_million)
    learned = {ROUTER: probs}
    texts = [request_text(examples[e]) for e in data.example_ids]
    learned["TF-IDF + LR"] = BASELINES.get("tfidf_lr")().oof_probabilities(texts=texts, correct=data.correct, folds=data.folds)
    if embeddings is not None:
        emb = np.stack([embeddings[e] for e in data.example_ids])
        learned["kNN (encoder)"] = BASELINES.get("knn")().oof_probabilities(embeddings=emb, correct=data.correct, folds=data.folds)
    routers = {name: evaluate_router(name, p, data, **kw) for name, p in learned.items()}
    frugal = {name: evaluate_router(name, p, data, target="cost_fraction") for name, p in learned.items()}
    fixed = {ROUTER: evaluate_router(ROUTER, probs, data, fixed_tau=0.5)}
    scores = {name: curve_scores(r, refs, data) for name, r in routers.items()}
    lam = {t: {name: evaluate_router(name, p, data, **{**kw, "target": t}, rule="lambda") for name, p in learned.items()
               if name != "kNN (encoder)"}
           for t in (target, "cost_fraction")}
    return Evaluation(data, refs, routers, frugal, fixed, scores, lam)


def evaluate_run(run_dir: str | Path, *, labels: str | Path | None = None, examples: str | Path | None = None,
                 pool: str | Path = "configs/pool.yaml", out: str | Path | None = None, target: str = "match_best",
                 budget_per_million: float | None = None) -> tuple[Evaluation, Path, dict[str, dict[str, float]]]:
    """`switchcraft evaluate RUN`: the report of a run's held-out predictions (no kNN: it needs the encoder),
    and the τ and λ to deploy per target (`deployable_parameters`)."""
    from data.pool import load_pool
    from data.schema import read_examples, read_labels
    from training.recipe import OOF_FILE

    run = Path(run_dir)
    oof_path = run / OOF_FILE
    if not oof_path.exists():
        raise FileNotFoundError(f"{oof_path}: no held-out predictions; train with `switchcraft train run_dir={run}` first")
    if labels is None:
        labels = next((p for p in (run / "labels.parquet", Path("runs/default/labels.parquet")) if p.exists()), None)
        if labels is None:
            raise FileNotFoundError(f"no labels.parquet in {run} or runs/default; pass --labels")
    labels = Path(labels)
    examples = Path(examples) if examples else labels.parent / "examples.parquet"
    if not examples.exists():
        raise FileNotFoundError(f"{examples}: missing; pass --examples (from `switchcraft ingest`)")
    oof = pd.read_parquet(oof_path)
    held_out = set(oof.loc[oof["fold"] >= 0, "example_id"])
    ex = {e.id: e for e in read_examples(examples)}
    ev = run_evaluation([lb for lb in read_labels(labels) if lb.example_id in held_out], ex, oof, load_pool(pool).names,
                        target=target, budget_per_million=budget_per_million)
    deploy = deployable_parameters(ev.data, oof_matrix(oof, ev.data.example_ids, ev.data.models)[0])
    context = {"command": f"switchcraft evaluate {run}", "labels": str(labels), "examples": str(examples), "target": target,
               "deploy": deploy}
    metrics = run / "router" / "metrics.json"
    if metrics.exists():
        m = json.loads(metrics.read_text())
        context["train"] = {k: m.get(k) for k in ("mode", "macro_auc", "macro_ece", "folds_run", "n_examples")}
    return ev, write_report(ev, Path(out) if out else run / "report", context=context), deploy


def deployable_parameters(data: RoutingData, probs: np.ndarray) -> dict[str, dict[str, float]]:
    """τ and λ for serving, calibrated on every held-out row (costs profiled on all of them).

    The report's numbers calibrate on other folds; a deployment has no test fold,
    so these use everything. Set them in configs/serving.yaml (`router.rule`,
    `router.lam`) or per request (`router-<τ>`).
    """
    from evaluation.routing_eval import choose_tau

    costs = data.cost.mean(axis=0)
    out: dict[str, dict[str, float]] = {}
    for target in ("match_best", "cost_fraction"):
        out[target] = {rule: choose_tau(probs, data.correct, data.cost, costs, target=target, rule=rule)
                       for rule in ("tau", "lambda")}
    return out


def headline(ev: Evaluation) -> pd.DataFrame:
    refs = ev.refs
    best, oracle = refs.best_single.outcome, refs.oracle
    rows = []

    def add(name, outcome, tau=None, scores=None):
        rows.append({
            "routing": name,
            "accuracy": outcome.accuracy,
            "usd_per_million": outcome.usd_per_million,
            "savings_vs_best": savings(outcome, best),
            "gap_closed": gap_closed(outcome, best, oracle),
            "tau": tau,
            "aiq": (scores or {}).get("aiq"),
            "apgr": (scores or {}).get("apgr"),
        })

    for name, r in ev.routers.items():
        add(f"{name} (τ for best-single accuracy)", r.outcome, _tau_text(r), ev.scores.get(name))
    for name, r in ev.frugal.items():
        add(f"{name} (τ for ≤ 10% of best-single cost)", r.outcome, _tau_text(r))
    for name, r in ev.fixed.items():
        add(f"{name} (τ = 0.5)", r.outcome, "0.5")
    for t, results in ev.lambda_rule.items():
        what = "≤ 10% of best-single cost" if t == "cost_fraction" else ("best-single accuracy" if t == "match_best" else t)
        for name, r in results.items():
            add(f"{name}, λ rule (λ for {what})", r.outcome, "λ " + _tau_text(r, "{:.2g}"))
    add("best single model", best)
    add("cheapest model", refs.cheapest.outcome)
    add("random (10 seeds)", refs.random)
    add("oracle", oracle)
    return pd.DataFrame(rows)


def _tau_text(r: RouterResult, fmt: str = "{:.2f}") -> str:
    vals = sorted(set(r.taus.values()))
    return ", ".join(fmt.format(v) for v in vals)


def singles_table(ev: Evaluation) -> pd.DataFrame:
    return pd.DataFrame([
        {"model": m, "accuracy": o.accuracy, "usd_per_million": o.usd_per_million} for m, o in ev.refs.singles.items()
    ]).sort_values("accuracy", ascending=False)


def category_table(ev: Evaluation) -> pd.DataFrame:
    choices = {name: r.choice for name, r in ev.routers.items()}
    choices["best single model"] = ev.refs.best_single.choice
    from evaluation.routing_metrics import oracle_choice

    choices["oracle"] = oracle_choice(ev.data.correct, ev.data.cost)
    table = per_category(choices, ev.data)
    return pd.DataFrame([{"category": c, **v} for c, v in table.items()])


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


def _md(df: pd.DataFrame) -> str:
    """A markdown table (pandas' to_markdown needs tabulate; this needs nothing)."""
    def fmt(v):
        if isinstance(v, float):
            return "" if math.isnan(v) else (f"{v:,.2f}" if abs(v) >= 100 else f"{v:.3f}")
        return "" if v is None else str(v)

    head = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in df.itertuples(index=False))


def write_report(ev: Evaluation, out_dir: str | Path, *, title: str = "switchcraft: oracle-gap report", context: dict | None = None) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    head, singles, cats = headline(ev), singles_table(ev), category_table(ev)
    head.to_csv(out / "headline.csv", index=False)
    singles.to_csv(out / "singles.csv", index=False)
    cats.to_csv(out / "per_category.csv", index=False)
    curves = [
        {"routing": n, "sweep": k, "param": p, "usd_per_million": c * 1e6, "accuracy": a}
        for n, r in ev.routers.items() for k, pts in (("tau", r.curve), ("lambda", r.lambda_curve)) for p, c, a in pts
    ]
    pd.DataFrame(curves).to_csv(out / "curves.csv", index=False)
    plot_curves(ev, "tau", out / "cost_accuracy_tau.png")
    plot_curves(ev, "lambda", out / "cost_accuracy_lambda.png")
    metrics = {
        "n_queries": len(ev.data.example_ids),
        "n_folds": len(ev.data.fold_ids),
        "models": ev.data.models,
        "headline": head.to_dict(orient="records"),
        "singles": singles.to_dict(orient="records"),
        "per_category": cats.to_dict(orient="records"),
        "imputed_costs": ev.data.imputed_costs,
        "calibrated_tau_per_fold": {n: r.taus for n, r in ev.routers.items()},
        "frugal_tau_per_fold": {n: r.taus for n, r in ev.frugal.items()},
        "lambda_per_fold": {t: {n: r.taus for n, r in rs.items()} for t, rs in ev.lambda_rule.items()},
        "context": context or {},
    }
    (out / "metrics.json").write_text(json.dumps(_clean(metrics), indent=2, allow_nan=False))
    lines = [
        f"# {title}", "",
        f"{len(ev.data.example_ids):,} queries, {len(ev.data.fold_ids)} folds, pool of {len(ev.data.models)} models. "
        "All numbers are held-out; definitions in docs/metrics.md."
        + (f" Calls without recorded usage, costed at their model's mean: {ev.data.imputed_costs}." if ev.data.imputed_costs else ""),
        "",
        "## Headline", "", _md(head), "",
        "![τ sweep](cost_accuracy_tau.png)", "", "![λ sweep](cost_accuracy_lambda.png)", "",
        "## Every single model", "", _md(singles), "",
        "## Accuracy per category", "", _md(cats), "",
    ]
    if context:
        lines += ["## Run", "", "```json", json.dumps(context, indent=2, default=str), "```", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _clean(v):
    """JSON has no NaN: undefined numbers (a gap with nothing to close) are written as null."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    return v
