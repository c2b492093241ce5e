"""The report's section "Without ground truth" (`switchcraft reproduce --labels consensus`).

    from evaluation.report.without_truth import without_truth
    metrics, lines = without_truth(ev, consensus_labels, consensus_oof, agreement)   # metrics.json keys, markdown

The rows come from `evaluation.offline.consensus_eval` (everything fitted on consensus labels, scored with the
true ones); this puts them beside the truth-fit rows of the same evaluation and writes the section.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from data.consensus import error_sharing_pairs
from data.schema import read_labels
from evaluation.offline.consensus_eval import ANCHORED, SHARED_ERRORS, consensus_fit_rows, side_by_side
from evaluation.offline.routing_eval import oof_matrix
from evaluation.report.evaluate import STRATEGIES
from evaluation.offline.strategy_eval import RowOutcome, row_of_choice


def section_markdown(rows: list[dict], agreement: dict, best_single: RowOutcome) -> list[str]:
    """The report's "Without ground truth" section."""
    lines = [
        "## Without ground truth", "",
        "What a user without expected answers gets: consensus labels (`data/consensus.py`: agreement in meaning "
        "among the pool's answers, a reliability-weighted EM) stand in for the verifier's labels everywhere a "
        "label is used — the router (trained on them, no auxiliary verified labels), the strategy menu, resolve "
        "rules, regressions, λ and the best single model whose accuracy is a target — and every row is scored "
        "with the verifier's labels on the held-out folds. Cost targets are budgets in USD (the truth-fit rows', "
        "given as numbers: prices need no label); the diagnostic row reads the budget's anchor, the best single "
        "model, off the consensus labels instead, and is compared with the truth-fit ≤ 20% row. Δ: consensus-fit "
        "minus truth-fit on the same resampled queries (95% paired bootstrap).", "",
        f"Consensus labels agree with the verifier's on **{agreement['agreement']:.2%}** of (query, model) pairs "
        f"({agreement['pairs']:,}; {agreement.get('abstained_queries', 0)} queries abstained; models' accuracy "
        f"ranking Spearman {agreement.get('accuracy_rank_spearman', float('nan')):.2f}). Best single model: "
        f"{best_single.correct.mean():.3f} at ${best_single.cost.mean() * 1e6:,.0f}/M.", "",
        "| routing | consensus-fit accuracy [95% CI] | $ / M [95% CI] | truth-fit accuracy [95% CI] | $ / M | "
        "Δ accuracy [95% CI] | Δ $ / M [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["consensus_fit_accuracy_ci"]
        clo, chi = r["consensus_fit_usd_per_million_ci"]
        tlo, thi = r["truth_fit_accuracy_ci"]
        dlo, dhi = r["delta_accuracy_ci"]
        ulo, uhi = r["delta_usd_per_million_ci"]
        lines.append(
            f"| {r['routing']} | {r['consensus_fit_accuracy']:.3f} [{lo:.3f}, {hi:.3f}] | "
            f"{r['consensus_fit_usd_per_million']:,.0f} [{clo:,.0f}, {chi:,.0f}] | "
            f"{r['truth_fit_accuracy']:.3f} [{tlo:.3f}, {thi:.3f}] | {r['truth_fit_usd_per_million']:,.0f} | "
            f"{r['delta_accuracy']:+.3f} [{dlo:+.3f}, {dhi:+.3f}] | {r['delta_usd_per_million']:+,.0f} [{ulo:+,.0f}, {uhi:+,.0f}] |")
    per_model = agreement.get("per_model") or {}
    if per_model:
        lines += ["", "| model | consensus accuracy | true accuracy | label agreement |", "|---|---:|---:|---:|"]
        lines += [f"| {m} | {v['consensus_accuracy']:.3f} | {v['true_accuracy']:.3f} | {v['agreement']:.3f} |"
                  for m, v in per_model.items()]
    per_cat = agreement.get("per_category") or {}
    if per_cat:
        lines += ["", "| BFCL category | label agreement | pairs |", "|---|---:|---:|"]
        lines += [f"| {c} | {v['agreement']:.3f} | {v['pairs']:,} |" for c, v in sorted(per_cat.items())]
    return lines + [""]


def without_truth(ev, consensus_labels_path, oof_path, agreement: dict) -> tuple[dict, list[str]]:
    """(metrics.json entries, report lines) of the "Without ground truth" section: `ev` is the truth-fit
    evaluation (its strategy rows and CascadeData), `consensus_labels_path` the consensus labels, `oof_path` the
    held-out probabilities of the router trained on them."""
    if ev.cascade is None:
        raise ValueError("the consensus-fit rows need the recorded outputs (strategy rows)")
    data = ev.data
    by_key = {(lb.example_id, lb.model): lb.correct for lb in read_labels(consensus_labels_path)}
    missing = [(e, m) for e in data.example_ids for m in data.models if (e, m) not in by_key]
    if missing:
        raise ValueError(f"{len(missing)} (example, model) pairs have no consensus label, e.g. {missing[:3]}")
    fit = np.array([[by_key[(e, m)] for m in data.models] for e in data.example_ids], dtype=bool)
    oof = pd.read_parquet(oof_path)
    probs, folds = oof_matrix(oof, data.example_ids, data.models)
    if np.isnan(probs).any():
        raise ValueError(f"{oof_path}: {int(np.isnan(probs).any(axis=1).sum())} rows have no probability")
    if any(folds.get(e) != f for e, f in zip(data.example_ids, data.folds)):
        raise ValueError(f"{oof_path}: the consensus router's folds differ from the truth router's")
    rows = consensus_fit_rows(ev.cascade, fit, probs, prefix=STRATEGIES)
    truth = {name: r for name, r in ev.strategies.items()}
    for t, what in (("match_best", "best-single accuracy"), ("cost_fraction", "≤ 10% of best-single cost")):
        r = ev.lambda_rule.get(t, {}).get("switchcraft router")
        if r is not None:
            truth[f"switchcraft router, λ rule, λ for {what}"] = row_of_choice("", r.choice, ev.cascade)
    truth[f"{STRATEGIES}, λ for {ANCHORED}"] = truth.get(f"{STRATEGIES}, λ for ≤ 20% of best-single cost")
    best = row_of_choice("best single model", ev.refs.best_single.choice, ev.cascade)
    table = side_by_side(rows, {k: v for k, v in truth.items() if v is not None}, best)
    pairs = error_sharing_pairs(ev.cascade.agree, fit, shared=SHARED_ERRORS)
    apart = [[data.models[a], data.models[b]] for a, b in zip(*np.nonzero(np.triu(pairs)))]
    metrics = {"consensus_label_agreement": agreement,
               "without_ground_truth": {"rows": table, "chosen": {n: dict(r.chosen.most_common(8)) for n, r in rows.items()},
                                        "label_accuracy_of_fit": float((fit == data.correct).mean()),
                                        "error_sharing_pairs": apart}}
    lines = section_markdown(table, agreement, best)
    shown = "; ".join(f"{a} & {b}" for a, b in apart) if apart else "none in this pool"
    lines[-1:-1] = [f"Agreement cascades between models that share most of their (consensus-labelled) errors, left "
                    f"off the consensus-fit menu: {shown}.", ""]
    return metrics, lines
