"""The category branch with a hard category assignment, against the shipped soft one and the category prior.

    .venv/bin/python -m evaluation.category_hard RUN_DIR OUT_DIR     # refit per fold (C = 1), then the λ rows
    .venv/bin/python -m evaluation.category_hard RUN_DIR OUT_DIR --reuse   # the λ rows from OUT_DIR's saved logits

The shipped branch's logit is logit(Σ_c P(c | request)·rate(c, model)): a soft mixture over a category guess
that is right 86–88% of the time. The category prior (the reference row) uses the *true* category's rates.
The lever measured here (fixed before any result was seen, docs/router.md "A hard category assignment"):

- `hard`: the branch's logit is logit(rate(argmax_c P(c | request), model)) — the most probable category's
  rates, as the prior does with the true category — blended with the head ⊕ lexical logit at the shipped
  weight 0.5;
- `hard ≥ 0.8`: the same where max_c P(c | request) ≥ 0.8 (threshold fixed in advance), else the soft mixture;
- `hard alone`: the hard branch as the router's probability by itself (weight 1): the category prior with a
  guessed category instead of the true one.

The per-fold P(c | request) and rates come from refitting the branch exactly as the recipe and
`evaluation.category_refit` do (same rows, TF-IDF, metadata scaling, C = 1); the soft refit must reproduce the
run's stored C = 1 logits (`max |Δ|` printed). The head and lexical parts are the run's (`oof_parts.npz`);
nothing else is retrained. Each router is paired with the category prior and with the shipped soft blend on
the same held-out queries (95% bootstrap), at the report's two single-model targets, λ rule.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from training.category import blend, logit

THRESHOLD = 0.8  # fixed before any result was seen
WEIGHT = 0.5  # the shipped weight (configs/train.yaml)
BRANCH_FILE = "category_hard.npz"


def branch_logits(probs: np.ndarray, rates: np.ndarray, threshold: float | None = None) -> np.ndarray:
    """The category branch's logits [n, models] from P(category | request) [n, k] and rates [k, models].

    threshold None: soft, logit(probs @ rates) (the shipped branch). A number t: hard, the argmax category's
    rates, on the rows whose top probability is ≥ t, the soft mixture on the rest (t = 0: hard everywhere).
    """
    probs, rates = np.asarray(probs, dtype=np.float64), np.asarray(rates, dtype=np.float64)
    if probs.ndim != 2 or rates.ndim != 2 or probs.shape[1] != rates.shape[0]:
        raise ValueError(f"category probabilities {probs.shape} and rates {rates.shape} do not match")
    soft = logit(probs @ rates)
    if threshold is None:
        return soft
    hard = logit(rates[probs.argmax(axis=1)])
    return np.where((probs.max(axis=1) >= threshold)[:, None], hard, soft)


def refit(run: Path, c: float = 1.0) -> dict[str, np.ndarray]:
    """Per held-out row: the branch's soft / hard / thresholded logits, its top category and top probability.

    The per-fold fit is `evaluation.category_refit`'s (the recipe's rows and features), keeping P(c | x)."""
    from evaluation.category_refit import fold_fits, run_config
    from evaluation.prior_gap import _lexical_weight
    from training.category import CategoryModel
    from training.recipe import PARTS_FILE

    cfg = run_config(run)
    parts = dict(np.load(run / PARTS_FILE))
    fold = parts["fold"]
    n, m = parts["head"].shape
    out = {k: np.full((n, m), np.nan) for k in ("soft", "hard", "hard_thr")}
    top, top_p, true = np.full(n, "", dtype=object), np.full(n, np.nan), None
    for ff in fold_fits(run, cfg, parts):
        t, rows, test = ff.table, ff.rows, ff.test
        true = np.asarray([str(x) for x in t.categories], dtype=object)
        cat = CategoryModel.fit(ff.x, ff.meta[rows], [t.categories[i] for i in rows], t.y[rows], t.mask[rows], c=c,
                                prior_rows=cfg.category.prior_rows)
        p = cat.category_probs(ff.x_test, ff.meta[test])
        out["soft"][test] = branch_logits(p, cat.rates)
        out["hard"][test] = branch_logits(p, cat.rates, 0.0)
        out["hard_thr"][test] = branch_logits(p, cat.rates, THRESHOLD)
        top[test], top_p[test] = np.asarray(cat.categories)[p.argmax(axis=1)], p.max(axis=1)
    if true is None:
        raise SystemExit(f"{run / PARTS_FILE}: no finished fold to refit")
    stored = parts.get(f"category_c{c:g}", parts["category"])
    done = fold >= 0
    check = float(np.nanmax(np.abs(out["soft"][done] - stored[done])))
    return {**out, "top": top.astype(str), "top_p": top_p, "true": true.astype(str), "check": np.array(check),
            "example_ids": parts["example_ids"], "models": parts["models"], "fold": fold,
            "base": blend(parts["head"], parts["lexical"], _lexical_weight(run))}


def routers_of(run: Path, br: dict[str, np.ndarray]):
    """(RoutingData of the run's held-out rows, {router: P(correct) [n, models]}, the category prior's P)."""
    from evaluation.category_prior import category_prior_probs
    from evaluation.prior_gap import held_out_data

    models = [str(m) for m in br["models"]]
    data, _ = held_out_data(run, models)
    ids = [str(e) for e in br["example_ids"]]
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))
    frame = lambda z: pd.DataFrame(sig(z), index=ids, columns=models).reindex(data.example_ids)[data.models].to_numpy()
    base = br["base"]
    routers = {"shipped (soft, weight 0.5)": frame(blend(base, br["soft"], WEIGHT)),
               "hard, weight 0.5": frame(blend(base, br["hard"], WEIGHT)),
               f"hard ≥ {THRESHOLD:g}, weight 0.5": frame(blend(base, br["hard_thr"], WEIGHT)),
               "hard alone": frame(br["hard"])}
    return data, routers, category_prior_probs(data.categories, data.correct, data.folds)


def compare(run: Path, br: dict[str, np.ndarray]) -> list[dict]:
    """The λ rows: shipped soft blend, hard, hard ≥ threshold, hard alone, and the category prior, paired."""
    from evaluation.prior_gap import TARGETS
    from evaluation.routing_eval import evaluate_router
    from evaluation.stats import paired_bootstrap

    data, routers, prior = routers_of(run, br)
    rows, ship = np.arange(len(prior)), next(iter(routers))
    out = []
    for target, what in TARGETS:
        res = {name: evaluate_router(name, p, data, target=target, rule="lambda")
               for name, p in (*routers.items(), ("category prior", prior))}
        per = {name: (data.correct[rows, r.choice], data.cost[rows, r.choice]) for name, r in res.items()}
        vs_prior, vs_ship = paired_bootstrap(per, reference="category prior"), paired_bootstrap(per, reference=ship)
        acc = lambda n, per=per: per[n][0].mean()
        usd = lambda n, per=per: per[n][1].mean() * 1e6
        for name in (*routers, "category prior"):
            r, s = vs_prior[name], vs_ship[name]
            out.append({"run": str(run), "target": what, "router": name,
                        "accuracy": f"{acc(name):.3f} [{r.accuracy.low:.3f}, {r.accuracy.high:.3f}]",
                        "$/M": f"{usd(name):,.0f}",
                        "Δ vs prior: acc.": f"{acc(name) - acc('category prior'):+.3f} "
                                            f"[{r.delta_accuracy.low:+.3f}, {r.delta_accuracy.high:+.3f}]",
                        "Δ vs prior: $/M": f"{usd(name) - usd('category prior'):+,.0f} "
                                           f"[{r.delta_usd_per_million.low:+,.0f}, {r.delta_usd_per_million.high:+,.0f}]",
                        "reached": r.reaches,
                        "Δ vs shipped: acc.": f"{acc(name) - acc(ship):+.3f} "
                                              f"[{s.delta_accuracy.low:+.3f}, {s.delta_accuracy.high:+.3f}]",
                        "Δ vs shipped: $/M": f"{usd(name) - usd(ship):+,.0f} "
                                             f"[{s.delta_usd_per_million.low:+,.0f}, {s.delta_usd_per_million.high:+,.0f}]"})
    return out


def guess_summary(br: dict[str, np.ndarray]) -> str:
    done = br["fold"] >= 0
    right = br["top"][done] == br["true"][done]
    sure = br["top_p"][done] >= THRESHOLD
    return (f"category guess right {right.mean():.3f}; top P ≥ {THRESHOLD:g} on {sure.mean():.3f} of rows "
            f"(right there {right[sure].mean():.3f}, elsewhere {right[~sure].mean() if (~sure).any() else float('nan'):.3f})")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--c", type=float, default=1.0, help="the classifier's C (the shipped 1)")
    ap.add_argument("--reuse", action="store_true", help="read OUT/category_hard.npz instead of refitting")
    a = ap.parse_args(argv)
    path = a.out / BRANCH_FILE
    if a.reuse:
        br = dict(np.load(path, allow_pickle=False))
    else:
        t0 = time.perf_counter()
        br = refit(a.run, a.c)
        a.out.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, **br)
        print(f"{path}: refit {time.perf_counter() - t0:.0f} s; the soft refit reproduces the run's C = {a.c:g} "
              f"logits to max |Δ| = {float(br['check']):.2e}")
    from evaluation.report import _md

    print(f"{a.run}: {guess_summary(br)}")
    print(_md(pd.DataFrame(compare(a.run, br))))


if __name__ == "__main__":
    main(sys.argv[1:])
