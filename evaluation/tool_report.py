"""Write the tool-routing evaluation: report.md, metrics.json, retrieval.csv, routing.csv, recall_at_k.png.

Called by `evaluation.tool_eval.evaluate` (`switchcraft tools eval`).
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


def retrieval_table(df: pd.DataFrame, bench: str, subset: str, match: str = "exact") -> str:
    sel = df[(df.benchmark == bench) & (df.subset == subset) & (df["match"] == match)]
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
    lines = ["| benchmark | subset | " + " | ".join(c[1] for c in cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for r in rows:
        vals = []
        for f, _ in cols:
            v = r[f]
            vals.append(f"{int(v):,}" if f in ("n", "tokens_before") else (f"{v:,.0f}" if f == "tokens_after" else _fmt(v)))
        lines.append(f"| {r['benchmark']} | {r['subset']} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def plot_recall(df: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = list(dict.fromkeys(df.benchmark))
    fig, axes = plt.subplots(1, len(benches), figsize=(4.2 * len(benches), 3.6), squeeze=False)
    for ax, b in zip(axes[0], benches):
        for method, style in (("hybrid+intents", "-D"), ("hybrid", "-o"), ("bm25", "--s"), ("dense", ":^")):
            sel = df[(df.benchmark == b) & (df.subset == "all") & (df.method == method) & (df["match"] == "exact")
                     & df.metric.str.startswith("recall@")]
            ks = sel.metric.str.split("@").str[1].astype(int)
            order = ks.argsort()
            ax.plot(ks.iloc[order], sel.value.iloc[order], style, label=method, markersize=4)
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
    run_dir.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(results["retrieval"])
    df.to_csv(run_dir / "retrieval.csv", index=False)
    pd.DataFrame(results["routing"]).to_csv(run_dir / "routing.csv", index=False)
    results["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results["python"] = platform.python_version()
    (run_dir / "metrics.json").write_text(json.dumps(results, indent=2, default=str))
    plot_recall(df, run_dir / "recall_at_k.png")
    out = ["# Tool routing evaluation", "",
           f"Created {results['created']}; queries per benchmark capped at {results['limit'] or 'none'}. "
           "Schema tokens: all-MiniLM-L6-v2 WordPiece tokens of each tool's OpenAI JSON definition.", ""]
    out += ["## Catalogs", "", "| benchmark | tools | groups | queries | catalog version | routing ms P50 / P99 (no embed) | modes |",
            "|---|---:|---:|---:|---|---|---|"]
    for b, e in results["benchmarks"].items():
        out.append(f"| {b} | {e['tools']:,} | {e['groups']:,} | {e['queries']:,} | {e['catalog_version']} | "
                   f"{e['route_ms_p50_without_embed']:.2f} / {e['route_ms_p99_without_embed']:.2f} | {e['modes']} |")
    out += ["", "## Retrieval over the whole catalog (no filter, no groups)", ""]
    for b in results["benchmarks"]:
        for match in ("exact", "name"):
            for subset in ("all", "single", "multi"):
                t = retrieval_table(df, b, subset, match)
                if t:
                    label = "" if match == "exact" else " (by function name: any schema variant counts)"
                    out += [f"### {b} — {subset}{label}", "", t, ""]
        out += [f"Published: {PUBLISHED.get(b, 'none found')}", ""]
    out += ["`hybrid+intents`: the router's ranking — the request split into its asks, each retrieved "
            "with BM25 + dense RRF, rankings merged by best score (`serving/tools/intents.py`).", ""]
    out += ["## The router (filter → groups → hybrid top-K per ask, widening, request_group)", "",
            routing_table(results["routing"]), ""]
    out += ["Asks per request (requests split into several asks are retrieved per ask): "
            + "; ".join(f"{b}: {e.get('asks_per_request', {})}" for b, e in results["benchmarks"].items()), ""]
    out += ["## Security: adversarial queries for tools the caller lacks a permission for", "",
            "| benchmark | restricted tools | adversarial queries | expansions tried | unauthorised exposures |",
            "|---|---:|---:|---:|---:|"]
    for b, e in results["benchmarks"].items():
        s = e.get("security")
        if s:
            out.append(f"| {b} | {s['restricted_tools']:,} | {s['adversarial_queries']:,} | {s['expansions_tried']:,} | "
                       f"{s['unauthorised_exposures']} |")
    out += ["", "![Recall@K](recall_at_k.png)", ""]
    path = run_dir / "report.md"
    path.write_text("\n".join(out))
    return path
