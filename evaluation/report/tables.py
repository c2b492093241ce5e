"""The report's tables: DataFrames for the CSVs, markdown for report.md.

    from evaluation.report.tables import headline, headline_markdown
    print(headline_markdown(headline(ev)))

The headline (every row with 95% bootstrap intervals, paired with the best single model on the same resampled
queries), every single model, accuracy per category, the strategies each strategy row ran, the router against
the category prior, and the in-sample ceiling of the cost targets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evaluation.offline.markdown import markdown_table
from evaluation.offline.routing_eval import RouterResult, per_category
from evaluation.offline.routing_metrics import gap_closed, oracle_choice, savings
from evaluation.offline.stats import RowIntervals, paired_bootstrap
from evaluation.report.evaluate import STRATEGIES, Evaluation, target_text
from evaluation.offline.strategy_eval import Ceiling, RowOutcome, row_of_choice


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
            add(f"{name}, λ rule (λ for {target_text(t)})", r.choice, "λ " + _tau_text(r, "{:.2g}"))
    for name, by_target in ev.references_extra.items():
        for t, r in by_target.items():
            add(f"{name}, λ rule (λ for {target_text(t)})", r.choice, "λ " + _tau_text(r, "{:.2g}"))
    refs = ev.refs
    # The model is chosen per fold on the training folds; the τ/λ column names each fold's choice.
    add("best single model", refs.best_single.choice, per_fold(refs.best_single.choice, ev.data.folds, ev.data.models))
    add("cheapest model", refs.cheapest.choice)
    add("oracle", oracle_choice(ev.data.correct, ev.data.cost))
    return rows


def per_fold(choice: np.ndarray, folds: np.ndarray, models: list[str]) -> str:
    """Which model a per-fold choice took, most folds first: "qwen3-32b on 4 of 5 folds, gpt-4o on 1", or
    "qwen3-32b on every fold"."""
    picked: dict[str, int] = {}
    fold_ids = sorted(set(folds.tolist()))
    for k in fold_ids:
        model = models[int(choice[folds == k][0])]
        picked[model] = picked.get(model, 0) + 1
    ranked = sorted(picked.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) == 1:
        return f"{ranked[0][0]} on every fold" if len(fold_ids) > 1 else ranked[0][0]
    first, *rest = ranked
    return ", ".join([f"{first[0]} on {first[1]} of {len(fold_ids)} folds", *(f"{m} on {n}" for m, n in rest)])


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
            "(`evaluation.offline.curves`).\n\n" + markdown_table(table))


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


def category_group(category: str) -> str:
    """BFCL's categories in three groups: whether to call at all (irrelevance, relevance), the user-contributed
    `live_*` requests, and the rest (curated, non-live). Other benchmarks keep their category."""
    if "relevance" in category:
        return "call or not (irrelevance, relevance)"
    return "live" if category.startswith("live_") else "non-live"


def category_groups_table(ev: Evaluation) -> pd.DataFrame:
    """Per group of categories (`category_group`; the categories themselves where that leaves one group): the
    strategy rows, the best single, the cheapest model and the oracle, with 95% intervals paired with the best
    single model on the group's held-out queries. Where routing pays, and where a request is "call or not"."""
    cats = ev.data.categories.astype(str)
    groups = np.array([category_group(c) for c in cats])
    if len(set(groups.tolist())) < 2:
        groups = cats
    named = {name: r for name, r, *_ in headline_rows(ev)
             if name.startswith(STRATEGIES) or name in ("best single model", "cheapest model", "oracle")}
    out = []
    for g in sorted(set(groups.tolist())):
        idx = np.flatnonzero(groups == g)
        ci = paired_bootstrap({n: (r.correct[idx], r.cost[idx]) for n, r in named.items()}, reference="best single model")
        best_cost = float(named["best single model"].cost[idx].mean())
        for name, r in named.items():
            acc, cost = float(r.correct[idx].mean()), float(r.cost[idx].mean())
            out.append({"group": g, "queries": len(idx), "routing": name, "accuracy": acc,
                        "accuracy_ci_low": ci[name].accuracy.low, "accuracy_ci_high": ci[name].accuracy.high,
                        "delta_accuracy_ci_low": ci[name].delta_accuracy.low,
                        "delta_accuracy_ci_high": ci[name].delta_accuracy.high,
                        "usd_per_million": cost * 1e6, "cost_share_of_best_single": cost / best_cost if best_cost else np.nan})
    return pd.DataFrame(out)


def category_groups_markdown(table: pd.DataFrame) -> str:
    rows = pd.DataFrame([{
        "group (queries)": f"{r['group']} ({r['queries']:,})", "routing": r["routing"],
        "accuracy [95% CI]": f"{r['accuracy']:.3f} [{r['accuracy_ci_low']:.3f}, {r['accuracy_ci_high']:.3f}]",
        "Δ vs best single [95% CI]": ("reference" if r["routing"] == "best single model" else
                                      f"[{r['delta_accuracy_ci_low']:+.3f}, {r['delta_accuracy_ci_high']:+.3f}]"),
        "$ / M": f"{r['usd_per_million']:,.0f}", "cost vs best single": f"{r['cost_share_of_best_single']:.0%}",
    } for r in table.to_dict(orient="records")])
    return markdown_table(rows)
