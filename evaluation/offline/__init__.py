"""Offline measurement on held-out folds: routing metrics, bootstrap intervals, baselines, the category prior,
the λ curves, the consensus-fit rows and the test–retest check. Everything here reads recorded labels and
out-of-fold predictions; nothing serves."""
