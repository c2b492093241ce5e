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
from pathlib import Path

import numpy as np
import pandas as pd

from evaluation.offline.markdown import markdown_table
from evaluation.offline.routing_eval import oof_matrix
from evaluation.report.evaluate import (
    Evaluation,
    deployable_parameters,
    policy_vs_fixed,
    router_vs_prior,
    run_evaluation,
)
from evaluation.report.plots import plot_curves, plot_strategies
from evaluation.report.tables import (
    category_groups_markdown,
    category_groups_table,
    category_table,
    ceiling_markdown,
    headline,
    headline_markdown,
    router_vs_prior_markdown,
    singles_table,
    strategies_table,
)


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
        from training.policy.fit import write_strategy_policy

        deploy["strategy_policy"] = str(write_strategy_policy(run / "router", ev.cascade, probs, **ev.all_rows))
    context = {"command": f"switchcraft evaluate {run}", "labels": str(labels), "examples": str(examples), "target": target,
               "deploy": deploy}
    metrics = run / "router" / "metrics.json"
    if metrics.exists():
        m = json.loads(metrics.read_text())
        context["train"] = {k: m.get(k) for k in ("mode", "macro_auc", "macro_ece", "folds_run", "n_examples")}
    return ev, write_report(ev, Path(out) if out else run / "report", context=context), deploy


def write_report(ev: Evaluation, out_dir: str | Path, *, title: str = "switchcraft: oracle-gap report", context: dict | None = None,
                 retest=None, extra_metrics: dict | None = None, extra_markdown: list[str] | None = None) -> Path:
    """`retest`: an evaluation.offline.retest.RetestResult, written beside the report and summarised in it.
    `extra_metrics` / `extra_markdown`: more metrics.json keys, and a section after the headline's plots
    (e.g. "Without ground truth", `evaluation.report.without_truth`)."""
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
    groups = category_groups_table(ev)
    groups.to_csv(out / "per_category_group.csv", index=False)
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
        "per_category_group": groups.to_dict(orient="records"),
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
    ctx = context or {}
    where = (f"Benchmark {ctx['benchmark']}, pool {ctx['pool']}: " if ctx.get("benchmark") and ctx.get("pool") else "")
    lines = [
        f"# {title}", "",
        f"{where}{len(ev.data.example_ids):,} queries, {len(ev.data.fold_ids)} folds, pool of {len(ev.data.models)} models. "
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
        "## Where routing pays: groups of categories", "",
        "Each group's held-out queries on their own, intervals paired with the best single model (chosen on the "
        "training folds over all categories) on the same queries.", "", category_groups_markdown(groups), "",
    ]
    if ev.ceilings:
        lines += ["## Can this pool meet the cost targets? (in-sample ceiling)", "", ceiling_markdown(ev.ceilings), ""]
    if ev.strategies:
        lines += ["## Strategies each strategy row ran (held-out queries)", "", markdown_table(strategies_table(ev)), ""]
    if retest is not None:
        from evaluation.offline.retest import retest_markdown, write_retest

        write_retest(retest, out / "retest")
        lines += ["## How much of the oracle is luck: test–retest (BFCL's 2024-07-25 run vs 2024-08-11)", "",
                  retest_markdown(retest), "", "![retest](retest/retest.png)", ""]
    elif ctx.get("retest_skipped"):
        lines += ["## How much of the oracle is luck: test–retest", "", f"Not measured: {ctx['retest_skipped']}.", ""]
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
