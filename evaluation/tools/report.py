"""Write the tool-routing evaluation: report.md, metrics.json, retrieval.csv, routing.csv, recall_at_k.png.

Called by `evaluation.tools.evaluate.evaluate` (`switchcraft tools eval`).
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import pandas as pd

PUBLISHED = {
    "metatool": "MetaTool (ICLR 2024) evaluates LLMs choosing among tools, not retrievers; its README publishes no retrieval figure.",
    "seal_tools": "Seal-Tools ships DPR training pairs (DPR_Training/) but its README publishes no retrieval figure.",
    "stabletoolbench": "The vendored files carry no README; StableToolBench publishes solvable pass/win rates of agents, not retrieval recall.",
    "bfcl": "thousand_tools/ (same pool): gpt-4o-mini on `multiple` falls from 92.5% (no distractors) to 48.5% (512 distractors).",
}


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def _retriever(df: pd.DataFrame, retriever: str | None) -> pd.DataFrame:
    if retriever is None or "retriever" not in df:
        return df
    return df[df.retriever == retriever]


SIDE_BY_SIDE = [  # (label, benchmark, subset, match): the goal-table rows first
    ("BFCL single, by name", "bfcl", "single", "name"), ("BFCL multi, by name", "bfcl", "multi", "name"),
    ("BFCL single, exact", "bfcl", "single", "exact"), ("BFCL multi, exact", "bfcl", "multi", "exact"),
    ("MetaTool single", "metatool", "single", "exact"), ("MetaTool multi", "metatool", "multi", "exact"),
    ("Seal-Tools single", "seal_tools", "single", "exact"), ("Seal-Tools multi", "seal_tools", "multi", "exact"),
    ("StableToolBench single", "stabletoolbench", "single", "exact"),
    ("StableToolBench multi", "stabletoolbench", "multi", "exact"),
]


def side_by_side_table(df: pd.DataFrame, retrievers: list[str], method: str = "hybrid+intents") -> str:
    """Recall@5 / Comprehensiveness@10 of each retriever on every benchmark subset, overall and per domain."""
    head = " | ".join(f"{r}: R@5 / C@10" for r in retrievers)
    lines = [f"| benchmark, subset | domain | n | {head} |", "|---|---|---:|" + "---|" * len(retrievers)]
    for label, bench, subset, match in SIDE_BY_SIDE:
        for domain in ("all", "in", "out"):
            key = subset if domain == "all" else f"domain:{domain}:{subset}"
            sel = df[(df.benchmark == bench) & (df.subset == key) & (df["match"] == match) & (df.method == method)]
            if sel.empty:
                continue
            cells, n = [], 0
            for r in retrievers:
                m = _retriever(sel, r).set_index("metric")
                if m.empty:
                    cells.append("—")
                    continue
                n = int(m["n"].iloc[0])
                cells.append(f"{_fmt(m.loc['recall@5', 'value'])} / {_fmt(m.loc['comp@10', 'value'])}")
            lines.append(f"| {label} | {domain} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def retrieval_table(df: pd.DataFrame, bench: str, subset: str, match: str = "exact", retriever: str | None = None) -> str:
    sel = _retriever(df, retriever)
    sel = sel[(sel.benchmark == bench) & (sel.subset == subset) & (sel["match"] == match)]
    if sel.empty:
        return ""
    cols = ["recall@1", "recall@3", "recall@5", "recall@10", "comp@5", "comp@10", "ndcg@10"]
    lines = [f"| method | n | {' | '.join(cols)} |", "|---|---:|" + "---:|" * len(cols)]
    for method in ("bm25", "dense", "hybrid", "hybrid+intents"):
        m = sel[sel.method == method].set_index("metric")
        if m.empty:
            continue
        lines.append(f"| {method} | {int(m['n'].iloc[0])} | " + " | ".join(_fmt(m.loc[c, 'value']) for c in cols) + " |")
    return "\n".join(lines)


def routing_table(rows: list[dict]) -> str:
    cols = [("n", "queries"), ("exposed", "tools shown"), ("recall", "recall"), ("comp", "all needed shown"),
            ("recall_name", "recall by name"), ("comp_name", "all needed by name"),
            ("coverage", "group coverage"), ("groups", "groups"), ("expansion_rate", "expansion rate"),
            ("comp_after", "all needed after expansions"), ("tokens_before", "schema tokens, catalog"),
            ("tokens_after", "schema tokens, shown"), ("token_reduction", "reduction")]
    lines = ["| retriever | benchmark | subset | " + " | ".join(c[1] for c in cols) + " |", "|---|---|---|" + "---:|" * len(cols)]
    for r in rows:
        vals = []
        for f, _ in cols:
            v = r[f]
            vals.append(f"{int(v):,}" if f in ("n", "tokens_before") else (f"{v:,.0f}" if f == "tokens_after" else _fmt(v)))
        lines.append(f"| {r.get('retriever', '')} | {r['benchmark']} | {r['subset']} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def plot_recall(df: pd.DataFrame, path: Path, retrievers: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = list(dict.fromkeys(df.benchmark))
    fig, axes = plt.subplots(1, len(benches), figsize=(4.2 * len(benches), 3.6), squeeze=False)
    for ax, b in zip(axes[0], benches):
        curves = [(r, m, st) for r in (retrievers or [None])
                  for m, st in (("hybrid+intents", "-D"), ("hybrid", "-o"), ("bm25", "--s"), ("dense", ":^"))
                  if not (m == "bm25" and r not in (None, (retrievers or [None])[0]))]  # BM25 is the same for all
        for retriever, method, style in curves:
            sel = _retriever(df, retriever)
            sel = sel[(sel.benchmark == b) & (sel.subset == "all") & (sel.method == method) & (sel["match"] == "exact")
                      & sel.metric.str.startswith("recall@")]
            ks = sel.metric.str.split("@").str[1].astype(int)
            order = ks.argsort()
            label = method if retriever is None else f"{retriever} {method}"
            ax.plot(ks.iloc[order], sel.value.iloc[order], style if retriever in (None, "base") else "-." + style.lstrip("-:"),
                    label=label, markersize=4, alpha=1.0 if retriever in (None, "base") else 0.8)
        ax.set_xscale("log")
        ax.set_title(b)
        ax.set_xlabel("K")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("Recall@K")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(results: dict, run_dir: Path) -> Path:
    """`results["benchmarks"]` is keyed `<retriever>:<benchmark>` (or by benchmark alone); rows carry `retriever`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(results["retrieval"])
    df.to_csv(run_dir / "retrieval.csv", index=False)
    pd.DataFrame(results["routing"]).to_csv(run_dir / "routing.csv", index=False)
    results["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results["python"] = platform.python_version()
    (run_dir / "metrics.json").write_text(json.dumps(results, indent=2, default=str))
    retrievers = results.get("retrievers") or [None]
    plot_recall(df, run_dir / "recall_at_k.png", results.get("retrievers"))
    benches = list(dict.fromkeys(k.split(":", 1)[-1] for k in results["benchmarks"]))
    out = ["# Tool routing evaluation", "",
           f"Created {results['created']}; queries per benchmark capped at {results['limit'] or 'none'}; held-out "
           "queries only (domain `in`: a catalog the trained retriever saw other queries of; `out`: nothing like "
           "it trained on; evaluation/tools/data.py). Schema tokens: all-MiniLM-L6-v2 WordPiece tokens of each "
           "tool's OpenAI JSON definition.", ""]
    if results.get("retrievers"):
        out += ["## Retrievers side by side: the router's ranking (hybrid + asks), Recall@5 / Comprehensiveness@10",
                "", side_by_side_table(df, results["retrievers"]), ""]
    out += ["## Catalogs", "", "| retriever:benchmark | tools | groups | queries | domains | catalog version | encoder | "
            "routing ms P50 / P99 (no embed) | modes |", "|---|---:|---:|---:|---|---|---|---|---|"]
    for b, e in results["benchmarks"].items():
        out.append(f"| {b} | {e['tools']:,} | {e['groups']:,} | {e['queries']:,} | {e.get('domains', '')} | "
                   f"{e['catalog_version']} | {e.get('encoder', '')} / {e.get('query_encoder', '')} | "
                   f"{e['route_ms_p50_without_embed']:.2f} / {e['route_ms_p99_without_embed']:.2f} | {e['modes']} |")
    out += ["", "## Retrieval over the whole catalog (no filter, no groups)", ""]
    for retriever in retrievers:
        for b in benches:
            for match in ("exact", "name"):
                for subset in ("all", "single", "multi"):
                    t = retrieval_table(df, b, subset, match, retriever)
                    if t:
                        label = "" if match == "exact" else " (by function name: any schema variant counts)"
                        who = f" — retriever {retriever}" if retriever else ""
                        out += [f"### {b} — {subset}{label}{who}", "", t, ""]
    for b in benches:
        out += [f"Published ({b}): {PUBLISHED.get(b, 'none found')}", ""]
    out += ["`hybrid+intents`: the router's ranking — the request split into its asks, each retrieved "
            "with BM25 + dense RRF, rankings merged by best score (`serving/tools/intents.py`).", ""]
    out += ["## The router (filter → groups → hybrid top-K per ask, widening, request_group)", "",
            routing_table(results["routing"]), ""]
    out += ["Asks per request (requests split into several asks are retrieved per ask): "
            + "; ".join(f"{b}: {e.get('asks_per_request', {})}" for b, e in results["benchmarks"].items()), ""]
    out += ["## Security: adversarial queries for tools the caller lacks a permission for", "",
            "| retriever:benchmark | restricted tools | adversarial queries | expansions tried | unauthorised exposures |",
            "|---|---:|---:|---:|---:|"]
    for b, e in results["benchmarks"].items():
        s = e.get("security")
        if s:
            out.append(f"| {b} | {s['restricted_tools']:,} | {s['adversarial_queries']:,} | {s['expansions_tried']:,} | "
                       f"{s['unauthorised_exposures']} |")
    out += ["", "![Recall@K](recall_at_k.png)", ""]
    if (run_dir / "value.json").exists():  # switchcraft tools value, into the same run directory
        out += [value_section(json.loads((run_dir / "value.json").read_text()), level=2), ""]
    path = run_dir / "report.md"
    path.write_text("\n".join(out))
    return path


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _ci(lo_hi, pct: bool = True) -> str:
    lo, hi = lo_hi
    return f"[{_pct(lo)}, {_pct(hi)}]" if pct else f"[{lo:,.0f}, {hi:,.0f}]"


def value_section(v: dict, level: int = 1) -> str:
    """The end-to-end table of `switchcraft tools value` (evaluation/tools/value.py)."""
    h = "#" * level
    out = [f"{h} End-to-end value: the recorded thousand-tools runs with and without the tool router", "",
           f"Encoder {v['encoder']}; catalog {v['catalog_tools']:,} tools (the {v['pool_tools']:,} pool cards + "
           "the questions' own docs): the router always faces every distractor. Accuracy with the router = "
           "mean over questions of [every needed tool exposed] × the recorded accuracy at the number of tools "
           "it offers (exposed + request_group), linear between recorded pool sizes. Assumption: accuracy "
           "with K tools depends on K, not on which K. Tokens: question + offered schemas (WordPiece); "
           "95% intervals (Wilson for a recorded accuracy, bootstrap otherwise).", "",
           "| model | category | distractors | accuracy without (%) | with router (%) | gain (points) | "
           "after request_group (%) | prompt tokens without | with router | USD / 1k requests without → with |",
           "|---|---|---:|---|---|---|---|---|---|---|"]
    for r in v["rows"]:
        usd = ("—" if r["usd_per_1k_without"] is None
               else f"{r['usd_per_1k_without']:.3f} → {r['usd_per_1k_router']:.3f}")
        out.append(f"| {r['model']} | {r['category']} | {r['distractors']} | {_pct(r['acc_without'])} "
                   f"{_ci(r['acc_without_ci'])} | {_pct(r['acc_router'])} {_ci(r['acc_router_ci'])} | "
                   f"{100 * r['gain']:+.1f} {_ci(r['gain_ci'])} | "
                   f"{_pct(r['acc_router_after'])} {_ci(r['acc_router_after_ci'])} | {r['tokens_without']:,.0f} "
                   f"{_ci(r['tokens_without_ci'], False)} | {r['tokens_router']:,.0f} {_ci(r['tokens_router_ci'], False)} | "
                   f"{usd} |")
    out += ["", "| category | questions | every needed tool exposed (exact) | by name | after request_group | "
            "tools offered | own docs |", "|---|---:|---|---|---|---:|---:|"]
    for c, s in v["routed"].items():
        out.append(f"| {c} | {s['n']} | {_pct(s['hit'])} {_ci(s['hit_ci'])} | {_pct(s['hit_name'])} "
                   f"{_ci(s['hit_name_ci'])} | {_pct(s['hit_after'])} {_ci(s['hit_after_ci'])} | "
                   f"{s['offered_mean']:.1f} | {s['own_mean']:.1f} |")
    cc = v.get("curve_checks", {})
    if cc:
        out += ["", f"Recorded curves: {cc['points']} points, {len(cc['not_whole'])} not a whole number of answers; "
                f"{cc['rises']} rises with more distractors, {len(cc['rises_outside_noise'])} beyond the Wilson "
                f"interval of the point before ({', '.join(cc['rises_outside_noise']) or 'none'})."]
    for tag, c in (v.get("per_query") or {}).items():
        acc = ", ".join(f"{p}: {_pct(a)}" for p, a in c["name_accuracy"].items())
        conf = "; ".join(f"pool {p}: {d['called_a_tool_the_router_exposes']} of {d['lost']} "
                         f"({d['no_call']} no call)" for p, d in c["confusions"].items())
        out += ["", f"Per-query check ({tag}, simple_python, {c['n']} questions with recorded predictions): "
                f"right function named by pool size {acc}%; router exposes the needed tool "
                f"{_pct(c['recall_all_needed'])}%. Estimate from the curve {_pct(c['product'])}%, from each "
                f"question's own recorded answers {_pct(c['per_query'])}% (difference 95% "
                f"{_ci(c['per_query_minus_product_ci'])} points). Questions named right at pool 0 and wrong with "
                f"distractors that called a tool the router also exposes: {conf}."]
    return "\n".join(out)
