"""Offline measurement on held-out folds: routing metrics, bootstrap intervals, baselines, the category prior,
the λ curves, the consensus-fit rows, the test–retest check and the session-routing cost simulation
(`sessions.py`, `switchcraft bench sessions`). Everything here reads recorded data (labels, out-of-fold predictions,
conversations); nothing serves."""
