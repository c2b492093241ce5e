"""Evaluation stage: baselines, metrics, reports, benchmarks."""
