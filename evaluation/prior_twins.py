"""How often the done-when's point test passes a router exactly as good as the bar (issue 24, a diagnostic).

    .venv/bin/python -m evaluation.prior_twins RUN [RUN ...] [--splits 20] [--share 0.5] [--out DIR]

Issue 24 asks the router's λ rows to "reach" the category prior's — accuracy not significantly below it, cost not
significantly above (paired bootstrap, 95%; `evaluation.prior_gap`) — on every row of the default pool and three
drawn pools. This asks what that test does to two routers of *equal* quality by construction. Each fold's training
rows are split at random into two halves A and B (drawn per `--splits` seed); twin A is the category prior with its
per-category rates fitted on the A half of the other folds, twin B on the B half. With `--share F` above 0.5 each
twin instead keeps an independent random share F of the rows (the two share about F² of them: closer to two
routers fitted on all the data, whose errors are correlated). Either way the twins read the same information (the
true category), with the same estimator, from exchangeable subsets: neither is better. Each twin gets its λ from
the λ rule on the training folds (`routing_eval.evaluate_router`, the report's two targets) and is tested against
the other, both ways, with the same paired bootstrap as `prior_gap`. The share of (split, direction) draws in which
a twin reaches its twin on a row, and on all rows of a run, is what the done-when's test asks of a router that
merely equals the bar. Every number is held out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def twin_subsets(n: int, seed: int, share: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """The rows each twin learns from: complementary halves at `share` 0.5, else two independent random subsets
    each keeping `share` of the rows."""
    if not 0.5 <= share < 1:
        raise ValueError(f"share must be in [0.5, 1), not {share}")
    rng = np.random.default_rng(seed)
    if share == 0.5:
        a = rng.random(n) < 0.5
        return a, ~a
    return rng.random(n) < share, rng.random(n) < share


def twin_rows(data, *, splits: int = 20, resamples: int = 2000, share: float = 0.5) -> list[dict]:
    """Per split seed, target and direction: whether twin X reaches twin Y (accuracy Δ interval not all below 0,
    cost Δ interval not all above 0), with the point differences."""
    from evaluation.category_prior import category_prior_probs
    from evaluation.prior_gap import TARGETS
    from evaluation.routing_eval import evaluate_router
    from evaluation.stats import paired_bootstrap

    rows, out = np.arange(len(data.correct)), []
    for s in range(splits):
        a, b = twin_subsets(len(rows), s, share)
        twins = {name: category_prior_probs(data.categories, data.correct, data.folds, fit=subset)
                 for name, subset in (("A", a), ("B", b))}
        for target, what in TARGETS:
            per = {}
            for name, p in twins.items():
                choice = evaluate_router(name, p, data, target=target, rule="lambda").choice
                per[name] = (data.correct[rows, choice], data.cost[rows, choice])
            for x, y in (("A", "B"), ("B", "A")):
                r = paired_bootstrap(per, reference=y, resamples=resamples, seed=s)[x]
                same = bool(np.array_equal(per[x][1], per[y][1]) and np.array_equal(per[x][0], per[y][0]))
                out.append({"split": s, "target": what, "direction": f"{x} vs {y}",
                            "Δ accuracy": float(per[x][0].mean() - per[y][0].mean()),
                            "Δ $/M": float((per[x][1].mean() - per[y][1].mean()) * 1e6),
                            "identical": same,
                            "reached": r.reaches})
    return out


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run and target: the share of draws reached, and of draws where the twins route identically; per run:
    the share of draws (split, direction) reaching on every target."""
    per_target = frame.groupby(["run", "target"], sort=False).agg(
        draws=("reached", "size"), reached=("reached", "mean"), identical=("identical", "mean"),
        median_abs_usd=("Δ $/M", lambda v: float(np.median(np.abs(v))))).reset_index()
    both = frame.groupby(["run", "split", "direction"], sort=False)["reached"].all().groupby("run", sort=False).mean()
    per_target["every target of the run"] = per_target["run"].map(both)
    return per_target


def main(argv: list[str]) -> None:
    from evaluation.prior_gap import held_out_data
    from evaluation.report import _md

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--share", type=float, default=0.5, help="0.5: complementary halves; above: independent subsets")
    ap.add_argument("--out", type=Path, default=None, help="write twins.csv (every draw) and twins.md here")
    a = ap.parse_args(argv)
    frames = []
    for run in a.runs:
        f = pd.DataFrame(twin_rows(held_out_data(run)[0], splits=a.splits, resamples=a.resamples, share=a.share))
        f.insert(0, "run", str(run))
        frames.append(f)
    frame = pd.concat(frames, ignore_index=True)
    table = summarise(frame)
    count = frame.groupby(["split", "direction"])["reached"].sum()
    rows = frame.groupby(["run", "target"]).ngroups
    spread = ", ".join(f"{k}: {v}" for k, v in count.value_counts().sort_index().items())
    text = (_md(table) + f"\n\nRows reached per draw (split, direction), of {rows}: mean {count.mean():.1f}; "
            f"draws by rows reached — {spread}; every row: {(count == rows).mean():.0%} of {len(count)} draws\n")
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(a.out / "twins.csv", index=False)
        (a.out / "twins.md").write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
