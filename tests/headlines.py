"""A metrics.json headline for the tests of the tables printed from it: every strategy and reference row."""

from __future__ import annotations


def headline_row(name, acc, lo, hi, usd, saved, dlo, dhi, tau=None):
    return {"routing": name, "accuracy": acc, "accuracy_ci_low": lo, "accuracy_ci_high": hi, "usd_per_million": usd,
            "usd_per_million_ci_low": usd * 0.9, "usd_per_million_ci_high": usd * 1.1, "savings_vs_best": saved,
            "gap_closed": 0.1, "vs_best_single": "accuracy n.s., cheaper", "delta_accuracy_ci_low": dlo,
            "delta_accuracy_ci_high": dhi, "latency_p50_s": 0.52, "latency_p95_s": 1.25, "calls_per_request": 1.4,
            "escalation_rate": 0.12, "tau": tau, "aiq": None, "apgr": None}


METRICS = {"headline": [
    headline_row("switchcraft strategies, λ for best-single accuracy", 0.911, 0.898, 0.925, 548.2, 0.7402, -0.011, 0.006, "λ 0.01"),
    headline_row("switchcraft strategies, λ for ≤ 20% of best-single cost", 0.917, 0.903, 0.930, 398.4, 0.8113, -0.006, 0.01),
    headline_row("switchcraft strategies, λ for ≤ 10% of best-single cost", 0.908, 0.894, 0.922, 187.9, 0.911, -0.015, 0.002),
    headline_row("best fixed strategy on training folds, for best-single accuracy", 0.92, 0.907, 0.933, 402.0, 0.81, -0.003,
         0.012),
    headline_row("switchcraft router (τ for best-single accuracy)", 0.912, 0.898, 0.925, 1725.3, 0.18, -0.01, 0.005, "0.41"),
    headline_row("category prior (reference: BFCL category known), λ rule (λ for best-single accuracy)", 0.913, 0.899, 0.926,
         1311.0, 0.38, -0.01, 0.006),
    headline_row("best single model", 0.915, 0.902, 0.928, 12110.0, 0.0, 0.0, 0.0, "claude-3-5-sonnet-20240620"),
    headline_row("cheapest model", 0.826, 0.807, 0.845, 68.0, 0.968, -0.11, -0.07),
    headline_row("oracle", 0.969, 0.961, 0.978, 158.0, 0.925, 0.045, 0.063),
    {"routing": "random (10 seeds)", "accuracy": 0.85, "usd_per_million": 900.0, "savings_vs_best": 0.57,
     "gap_closed": float("nan")},
]}
