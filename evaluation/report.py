"""The oracle-gap report of a run: tables, plots, metrics.json, CSVs.

    switchcraft evaluate runs/default          # reads labels.parquet, oof_predictions.parquet, examples.parquet

Writes into `<run>/report/`: `report.md`, `metrics.json`, `headline.csv`,
`singles.csv`, `per_category.csv`, `curves.csv`, `strategies.csv`, `cost_accuracy_tau.png`,
`cost_accuracy_lambda.png`, `cost_accuracy_strategies.png`. Definitions: docs/metrics.md.

Every headline row carries 95% bootstrap intervals (over queries, paired with
the best single model) for accuracy and cost, whether its difference from the
best single model is significant, latency P50/P95 from the recorded latencies,
and calls and escalations per request. Strategy rows (`switchcraft strategies`)
need the recorded outputs (the agreement checks); without them only single-model
rows are reported.
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
from evaluation.curves import bootstrap_curves, read_at_cost  # noqa: E402
from evaluation.markdown import markdown_table  # noqa: E402
from evaluation.routing_eval import (  # noqa: E402
    References,
    RouterResult,
    RoutingData,
    curve_scores,
    evaluate_router,
    oof_matrix,
    per_category,
    references,
)
from evaluation.routing_metrics import gap_closed, oracle_choice, savings  # noqa: E402
from evaluation.stats import RowIntervals, paired_bootstrap  # noqa: E402
from evaluation.strategies import CascadeData  # noqa: E402
from evaluation.strategy_eval import (  # noqa: E402
    Ceiling,
    RowOutcome,
    best_fixed_strategy,
    default_menu,
    evaluate_strategy_policies,
    fixed_ceilings,
    fold_simulations,
    simulate_all_rows,
    row_of_choice,
)

ROUTER = "switchcraft router"
STRATEGIES = "switchcraft strategies"
PRIOR = "category prior (reference: BFCL category known)"
# The strategy rows' targets: (target, cost fraction, what the row name says).
STRATEGY_TARGETS = (("match_best", None, "best-single accuracy"), ("cost_fraction", 0.2, "≤ 20% of best-single cost"),
                    ("cost_fraction", 0.1, "≤ 10% of best-single cost"))


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
    cascade: CascadeData | None = None  # agreement and latency: strategy rows and latency columns need it
    strategies: dict[str, RowOutcome] = field(default_factory=dict)  # headline name → held-out outcome
    references_extra: dict[str, dict[str, RouterResult]] = field(default_factory=dict)  # e.g. the category prior
    ceilings: list[Ceiling] = field(default_factory=list)  # in-sample: can any one strategy meet the cost targets?
    all_rows: dict = field(default_factory=dict)  # {"specs", "sim"}: the menu on every row (ceilings, deployable policy)
    probs: dict[str, np.ndarray] = field(default_factory=dict)  # held-out P(correct): the router's and the prior's


def run_evaluation(
    labels: list[Label],
    examples: dict[str, Example],
    oof: pd.DataFrame,
    models: list[str],
    *,
    embeddings: dict[str, np.ndarray] | None = None,
    target: str = "match_best",
    budget_per_million: float | None = None,
    outputs: list | None = None,
    pool=None,
    progress: bool = False,
) -> Evaluation:
    """Every routing row on the held-out folds. With `outputs` (the recorded outputs the labels were made
    from) and `pool`, also the strategy rows (agreement cascades) and recorded latencies."""
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
    ev = Evaluation(data, refs, routers, frugal, fixed, scores, lam)
    from evaluation.category_prior import category_prior_probs

    prior = category_prior_probs(data.categories, data.correct, data.folds)
    ev.references_extra[PRIOR] = {
        t: evaluate_router("category prior", prior, data, **{**kw, "target": t}, rule="lambda") for t in (target, "cost_fraction")}
    ev.probs = {ROUTER: probs, PRIOR: prior}
    if outputs is not None and pool is not None:
        ev.cascade = CascadeData.from_outputs(outputs, examples, pool, data, progress=progress)
        ev.strategies = strategy_rows(ev.cascade, probs)
        specs = default_menu(ev.cascade)
        ev.all_rows = {"specs": specs, "sim": simulate_all_rows(ev.cascade, specs)}
        ev.ceilings = fixed_ceilings(ev.cascade, tuple(f for t, f, _ in STRATEGY_TARGETS if t == "cost_fraction"),
                                     **ev.all_rows)
    return ev


def strategy_rows(cd: CascadeData, probs: np.ndarray) -> dict[str, RowOutcome]:
    """The strategy policy at each target, and the best fixed strategy (chosen on training folds) beside it."""
    specs = default_menu(cd)
    sims = fold_simulations(cd, specs)
    out = evaluate_strategy_policies(cd, probs, [(t, f or 0.2) for t, f, _ in STRATEGY_TARGETS],
                                     [f"{STRATEGIES}, λ for {what}" for _, _, what in STRATEGY_TARGETS], specs=specs, sims=sims)
    for target, fraction, what in STRATEGY_TARGETS[:2]:
        out[f"best fixed strategy on training folds, for {what}"] = best_fixed_strategy(
            cd, target=target, cost_fraction=fraction or 0.2, specs=specs, sims=sims)
    return out


def evaluate_run(run_dir: str | Path, *, labels: str | Path | None = None, examples: str | Path | None = None,
                 pool: str | Path = "configs/pool.yaml", out: str | Path | None = None, target: str = "match_best",
                 budget_per_million: float | None = None) -> tuple[Evaluation, Path, dict[str, dict[str, float]]]:
    """`switchcraft evaluate RUN`: the report of a run's held-out predictions (no kNN: it needs the encoder),
    and the τ and λ to deploy per target (`deployable_parameters`)."""
    from data.pool import load_pool
    from data.schema import read_examples, read_labels, read_outputs
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
    pool_ = load_pool(pool)
    # The strategy rows need the recorded outputs the labels came from (beside them, from `switchcraft reproduce`).
    outputs_path = labels.parent / "outputs.parquet"
    outputs = read_outputs(outputs_path, models=[m.recording for m in pool_.models]) if outputs_path.exists() else None
    ev = run_evaluation([lb for lb in read_labels(labels) if lb.example_id in held_out], ex, oof, pool_.names,
                        target=target, budget_per_million=budget_per_million, outputs=outputs, pool=pool_)
    probs = oof_matrix(oof, ev.data.example_ids, ev.data.models)[0]
    deploy = deployable_parameters(ev.data, probs)
    if ev.cascade is not None and (run / "router" / "router.json").exists():
        from evaluation.strategy_eval import write_strategy_policy

        deploy["strategy_policy"] = str(write_strategy_policy(run / "router", ev.cascade, probs, **ev.all_rows))
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


def headline_rows(ev: Evaluation) -> list[tuple[str, RowOutcome, str | None, dict | None]]:
    """(name, held-out outcome per query, τ/λ text, curve scores) for every headline row, in table order."""
    rows: list[tuple[str, RowOutcome, str | None, dict | None]] = []

    def add(name, choice, tau=None, scores=None):
        rows.append((name, _row(name, choice, ev), tau, scores))

    for name, r in ev.strategies.items():
        rows.append((name, r, ("λ " + ", ".join(f"{v:.2g}" for v in sorted(set(r.params.values())))) if r.params else None,
                     None))
    for name, r in ev.routers.items():
        add(f"{name} (τ for best-single accuracy)", r.choice, _tau_text(r), ev.scores.get(name))
    for name, r in ev.frugal.items():
        add(f"{name} (τ for ≤ 10% of best-single cost)", r.choice, _tau_text(r))
    for name, r in ev.fixed.items():
        add(f"{name} (τ = 0.5)", r.choice, "0.5")
    for t, results in ev.lambda_rule.items():
        for name, r in results.items():
            add(f"{name}, λ rule (λ for {_target_text(t)})", r.choice, "λ " + _tau_text(r, "{:.2g}"))
    for name, by_target in ev.references_extra.items():
        for t, r in by_target.items():
            add(f"{name}, λ rule (λ for {_target_text(t)})", r.choice, "λ " + _tau_text(r, "{:.2g}"))
    refs = ev.refs
    # The model is chosen per fold on the training folds; the τ/λ column names it (the most common one).
    add("best single model", refs.best_single.choice, ev.data.models[int(np.bincount(refs.best_single.choice).argmax())])
    add("cheapest model", refs.cheapest.choice)
    add("oracle", oracle_choice(ev.data.correct, ev.data.cost))
    return rows


def _target_text(t: str) -> str:
    return "≤ 10% of best-single cost" if t == "cost_fraction" else ("best-single accuracy" if t == "match_best" else t)


def _row(name: str, choice: np.ndarray, ev: Evaluation) -> RowOutcome:
    if ev.cascade is not None:
        return row_of_choice(name, choice, ev.cascade)
    d = ev.data
    rows = np.arange(len(choice))
    n = len(choice)
    return RowOutcome(name, d.correct[rows, choice], d.cost[rows, choice], np.full(n, np.nan), np.ones(n, int),
                      np.zeros(n, bool))


def row_intervals(ev: Evaluation) -> dict[str, RowIntervals]:
    rows = headline_rows(ev)
    return paired_bootstrap({name: (r.correct, r.cost) for name, r, *_ in rows}, reference="best single model")


def headline(ev: Evaluation) -> pd.DataFrame:
    refs = ev.refs
    best, oracle = refs.best_single.outcome, refs.oracle
    rows = headline_rows(ev)
    cis = row_intervals(ev)
    out = []
    for name, r, tau, scores in rows:
        o, ci = r.outcome, cis[name]
        summary = r.summary()
        out.append({
            "routing": name,
            "accuracy": o.accuracy,
            "accuracy_ci_low": ci.accuracy.low,
            "accuracy_ci_high": ci.accuracy.high,
            "usd_per_million": o.usd_per_million,
            "usd_per_million_ci_low": ci.usd_per_million.low,
            "usd_per_million_ci_high": ci.usd_per_million.high,
            "savings_vs_best": savings(o, best),
            "gap_closed": gap_closed(o, best, oracle),
            "vs_best_single": "reference" if name == "best single model" else ci.verdict(),
            "delta_accuracy_ci_low": ci.delta_accuracy.low,
            "delta_accuracy_ci_high": ci.delta_accuracy.high,
            "latency_p50_s": summary["latency_p50_s"],
            "latency_p95_s": summary["latency_p95_s"],
            "calls_per_request": summary["calls_per_request"],
            "escalation_rate": summary["escalation_rate"],
            "tau": tau,
            "aiq": (scores or {}).get("aiq"),
            "apgr": (scores or {}).get("apgr"),
        })
    out.append({"routing": "random (10 seeds)", "accuracy": refs.random.accuracy,
                "usd_per_million": refs.random.usd_per_million, "savings_vs_best": savings(refs.random, best),
                "gap_closed": gap_closed(refs.random, best, oracle)})
    return pd.DataFrame(out)


def headline_markdown(head: pd.DataFrame) -> str:
    """The headline as people read it: intervals inline, the machine columns left to headline.csv."""
    def iv(v, lo, hi, fmt):
        if pd.isna(lo):
            return fmt.format(v)
        return f"{fmt.format(v)} [{fmt.format(lo)}, {fmt.format(hi)}]"

    rows = []
    for r in head.to_dict(orient="records"):
        rows.append({
            "routing": r["routing"],
            "accuracy [95% CI]": iv(r["accuracy"], r.get("accuracy_ci_low"), r.get("accuracy_ci_high"), "{:.3f}"),
            "$ / M queries [95% CI]": iv(r["usd_per_million"], r.get("usd_per_million_ci_low"),
                                         r.get("usd_per_million_ci_high"), "{:,.0f}"),
            "savings vs best single": r["savings_vs_best"],
            "gap closed": r["gap_closed"],
            "vs best single (paired)": r.get("vs_best_single") or "",
            "latency P50 / P95 (s)": "" if pd.isna(r.get("latency_p50_s", np.nan)) else
            f"{r['latency_p50_s']:.2f} / {r['latency_p95_s']:.2f}",
            "calls / request": r.get("calls_per_request", np.nan),
            "escalated": r.get("escalation_rate", np.nan),
            "τ or λ": r.get("tau") or "",
        })
    return markdown_table(pd.DataFrame(rows))


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
    choices["oracle"] = oracle_choice(ev.data.correct, ev.data.cost)
    table = per_category(choices, ev.data)
    for name, r in ev.strategies.items():
        if name.startswith(STRATEGIES):
            for cat, row in table.items():
                row[name] = float(r.correct[ev.data.categories == cat].mean())
    return pd.DataFrame([{"category": c, **v} for c, v in table.items()])


def strategies_table(ev: Evaluation) -> pd.DataFrame:
    """Which strategies each strategy row ran, on how many held-out queries."""
    return pd.DataFrame([{"routing": name, "strategy": st, "queries": k}
                         for name, r in ev.strategies.items() for st, k in r.chosen.most_common()])


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


def policy_vs_fixed(ev: Evaluation) -> dict[str, dict[str, list[float]]]:
    """Per target with both rows: the strategy policy − the best fixed strategy, paired on the same held-out
    queries (95% intervals of the accuracy and $/M differences): does choosing per request pay on this pool?"""
    out = {}
    for _, _, what in STRATEGY_TARGETS:
        policy, fixed = ev.strategies.get(f"{STRATEGIES}, λ for {what}"), ev.strategies.get(
            f"best fixed strategy on training folds, for {what}")
        if policy is None or fixed is None:
            continue
        ci = paired_bootstrap({"policy": (policy.correct, policy.cost), "fixed": (fixed.correct, fixed.cost)},
                              reference="fixed")["policy"]
        out[what] = {"delta_accuracy": [float((policy.correct.mean() - fixed.correct.mean())), ci.delta_accuracy.low,
                                        ci.delta_accuracy.high],
                     "delta_usd_per_million": [float((policy.cost.mean() - fixed.cost.mean()) * 1e6),
                                               ci.delta_usd_per_million.low, ci.delta_usd_per_million.high]}
    return out


def router_vs_prior(ev: Evaluation, *, resamples: int = 1000, seed: int = 0) -> list[dict]:
    """Per λ target: the router's λ row against the category prior's, paired on the same held-out queries
    ("reached": `RowIntervals.reaches`, accuracy not significantly below, cost not significantly above), and
    the router's held-out λ curve read at the prior's cost against the prior's own curve there
    (`evaluation.curves`, `resamples` paired resamples: how well the router ranks, apart from where the λ
    rule lands). Empty without the router's and the prior's probabilities."""
    prior_rows, lam = ev.references_extra.get(PRIOR, {}), ev.lambda_rule
    if ROUTER not in ev.probs or PRIOR not in ev.probs or not prior_rows:
        return []
    n = len(ev.data.example_ids)
    rows, idx = np.arange(n), np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    curves = bootstrap_curves({name: ev.probs[name] for name in (ROUTER, PRIOR)}, ev.data, idx)
    out = []
    for t, prior_r in prior_rows.items():
        router_r = lam.get(t, {}).get(ROUTER)
        if router_r is None:
            continue
        per = {name: (ev.data.correct[rows, r.choice], ev.data.cost[rows, r.choice])
               for name, r in ((ROUTER, router_r), (PRIOR, prior_r))}
        ci = paired_bootstrap(per, reference=PRIOR)[ROUTER]
        (acc, usd), (p_acc, p_usd) = ((c.mean(), d.mean() * 1e6) for c, d in (per[ROUTER], per[PRIOR]))
        v, ref, lo, hi = read_at_cost(curves, PRIOR, per[PRIOR][1], idx)[ROUTER]
        out.append({"target": _target_text(t), "router": [float(acc), float(usd)], "prior": [float(p_acc), float(p_usd)],
                    "delta_accuracy": [float(acc - p_acc), ci.delta_accuracy.low, ci.delta_accuracy.high],
                    "delta_usd_per_million": [float(usd - p_usd), ci.delta_usd_per_million.low,
                                              ci.delta_usd_per_million.high],
                    "reached": ci.reaches,
                    "curve_at_prior_cost": {"router": v, "prior": ref, "delta": [v - ref, lo, hi], "not_below": bool(hi >= 0)}})
    return out


def router_vs_prior_markdown(rows: list[dict]) -> str:
    def d(v, fmt):
        return f"{fmt.format(v[0])} [{fmt.format(v[1])}, {fmt.format(v[2])}]"

    table = pd.DataFrame([{
        "λ target": r["target"],
        "router": f"{r['router'][0]:.3f} @ ${r['router'][1]:,.0f}/M",
        "category prior": f"{r['prior'][0]:.3f} @ ${r['prior'][1]:,.0f}/M",
        "Δ accuracy": d(r["delta_accuracy"], "{:+.3f}"), "Δ $/M": d(r["delta_usd_per_million"], "{:+,.0f}"),
        "reached": "yes" if r["reached"] else "no",
        "curves at the prior's cost: router − prior": d(r["curve_at_prior_cost"]["delta"], "{:+.3f}"),
    } for r in rows])
    return ("The category prior routes with each request's true BFCL category, which serving never knows: the bar the "
            "router has to clear. Paired on the same held-out queries (95%); *reached*: accuracy not significantly "
            "below the prior's and cost not significantly above. A λ row is one operating point, which moves between "
            "routers of equal quality (two twins of the prior reach each other on about half such rows, "
            "docs/research.md); the last column compares the whole held-out λ curves at the prior's cost instead "
            "(`evaluation.curves`).\n\n" + markdown_table(table))


def write_report(ev: Evaluation, out_dir: str | Path, *, title: str = "switchcraft: oracle-gap report", context: dict | None = None,
                 retest=None, extra_metrics: dict | None = None, extra_markdown: list[str] | None = None) -> Path:
    """`retest`: an evaluation.retest.RetestResult, written beside the report and summarised in it.
    `extra_metrics` / `extra_markdown`: more metrics.json keys, and a section after the headline's plots
    (e.g. "Without ground truth", `evaluation.consensus_eval`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    head, singles, cats = headline(ev), singles_table(ev), category_table(ev)
    vs_prior = router_vs_prior(ev)
    head.to_csv(out / "headline.csv", index=False)
    strategies_table(ev).to_csv(out / "strategies.csv", index=False)
    if ev.strategies:  # per held-out query: the strategy each strategy row ran (for re-checking by hand)
        pd.DataFrame({"example_id": ev.data.example_ids, "fold": ev.data.folds,
                      **{name: r.per_query for name, r in ev.strategies.items()}}).to_csv(out / "strategy_choices.csv", index=False)
    plot_strategies(ev, head, out / "cost_accuracy_strategies.png")
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
        "strategies_chosen": {n: dict(r.chosen.most_common()) for n, r in ev.strategies.items()},
        "strategy_lambda_per_fold": {n: r.params for n, r in ev.strategies.items()},
        "latency_recorded": ev.cascade.latency_known if ev.cascade is not None else None,
        "fixed_strategy_ceiling": [{**vars(c), "reaches_best_single": c.reaches_best_single} for c in ev.ceilings],
        "strategies_vs_best_fixed": policy_vs_fixed(ev),
        "router_vs_category_prior": vs_prior,
        "context": context or {},
        **(extra_metrics or {}),
    }
    (out / "metrics.json").write_text(json.dumps(_clean(metrics), indent=2, allow_nan=False))
    lines = [
        f"# {title}", "",
        f"{len(ev.data.example_ids):,} queries, {len(ev.data.fold_ids)} folds, pool of {len(ev.data.models)} models. "
        "All numbers are held-out; definitions in docs/metrics.md."
        + (f" Calls without recorded usage, costed at their model's mean: {ev.data.imputed_costs}." if ev.data.imputed_costs else ""),
        "",
        "## Headline", "",
        "Intervals: 95% bootstrap over queries; 'vs best single' compares each row with the best single model on the "
        "same resampled queries (n.s.: the interval of the difference includes 0). Latency from the recorded "
        "latencies (concurrent calls: the slowest; sequential: the sum).", "",
        headline_markdown(head), "",
        "![every row](cost_accuracy_strategies.png)", "",
        "![τ sweep](cost_accuracy_tau.png)", "", "![λ sweep](cost_accuracy_lambda.png)", "",
        *(extra_markdown or []),
        *(["## The router against the category prior", "", router_vs_prior_markdown(vs_prior), ""] if vs_prior else []),
        "## Every single model", "", markdown_table(singles), "",
        "## Accuracy per category", "", markdown_table(cats), "",
    ]
    if ev.ceilings:
        lines += ["## Can this pool meet the cost targets? (in-sample ceiling)", "", ceiling_markdown(ev.ceilings), ""]
    if ev.strategies:
        lines += ["## Strategies each strategy row ran (held-out queries)", "", markdown_table(strategies_table(ev)), ""]
    if retest is not None:
        from evaluation.retest import retest_markdown, write_retest

        write_retest(retest, out / "retest")
        lines += ["## How much of the oracle is luck: test–retest (BFCL's 2024-07-25 run vs 2024-08-11)", "",
                  retest_markdown(retest), "", "![retest](retest/retest.png)", ""]
    if context:
        lines += ["## Run", "", "```json", json.dumps(context, indent=2, default=str), "```", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def ceiling_markdown(ceilings: list[Ceiling]) -> str:
    """The in-sample ceiling per cost target, said as what it is: chosen on the rows it scores."""
    first = ceilings[0]
    text = ("What routing without per-request information reaches on all rows: the best one strategy within each "
            "budget, and the best mix of two strategies spending it (a share of requests to the dearer), resolve "
            "rules fitted on the same rows. Chosen on the rows it scores: an optimistic reference, not a result. "
            f"Where it stays below the best single model on all rows ({first.best_single} "
            f"{first.best_single_accuracy:.3f} at ${first.best_single_usd_per_million:,.0f}/M), meeting the target "
            "must come from what the router knows about each request.")
    rows = pd.DataFrame([{
        "cost target": f"≤ {c.cost_fraction:.0%} of best-single cost",
        "one strategy": c.strategy or "(none fits the budget)",
        "accuracy": round(c.accuracy, 3), "$ / M queries": round(c.usd_per_million) if c.strategy else None,
        "best mix of two": c.mix or "(none)", "mix accuracy": round(c.mix_accuracy, 3),
        "reaches best-single accuracy": "yes" if c.reaches_best_single else "no"} for c in ceilings])
    return text + "\n\n" + markdown_table(rows)


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
