"""The router against the bar it has to clear: the category prior, paired on the same held-out queries.

    .venv/bin/python -m evaluation.prior_gap RUN_DIR [RUN_DIR ...]   # each: a reproduce / train run (oof + labels)

For each run: the router's λ rows and the category prior's (BFCL's category known, its rates from the training
folds; `evaluation.category_prior`) at the report's two single-model targets (best-single accuracy; ≤ 10% of
its cost), each with its 95% bootstrap interval and the paired difference router − prior (accuracy, $/M).
"Reached" means the accuracy difference's interval is not all below 0 and the router costs no more than the
prior (its cost difference's interval is not all above 0). Every number is held out (docs/metrics.md).

Where the run has `oof_parts.npz` with the category branch, two more routers are computed from the stored
parts (no retraining): the fixed blend (category weight 0.5, C = 1: `configs/train.yaml`) and the inner-fold
choice (`training.category.inner_fold_choices`: for each held-out fold the weight from {0, 0.25, 0.5, 0.75,
1} and the C among the stored `category_c<C>` parts (C in {1, 10, 100}) with the lowest mean log loss
on the *other* folds' out-of-fold rows — what `switchcraft train` with the grids does). The inner-fold
router is also paired with the fixed one. A run trained without per-C parts gets them from
`evaluation.category_refit`. A router identical to the run's own is printed once, its name saying so.

A third blend, "λ-aligned weight" (a measured lever, not what `switchcraft train` does): for each held-out fold
the category weight (from {0, 0.25, 0.5, 0.75, 1}, the run's C) and λ are chosen *together* on the training
folds by the λ rule's own target — the cheapest (weight, λ) whose training accuracy reaches the best single
model's, or the most accurate within the cost budget — instead of the weight by log loss; see `aligned_choice`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from data.schema import read_examples, read_labels
from evaluation.category_prior import category_prior_probs
from evaluation.report import oof_matrix
from evaluation.routing_eval import (RoutingData, best_point, best_single_column, choose_tau, evaluate_router,
                                     outcome_of, profiled_costs)
from evaluation.stats import paired_bootstrap
from serving.policy import choose_batch_lambda
from training.calibration import sigmoid
from training.category import C_GRID, WEIGHT_GRID, blend, inner_fold_choices

TARGETS = (("match_best", "best-single accuracy"), ("cost_fraction", "≤ 10% of best-single cost"))
PARTS_FILE = "oof_parts.npz"  # training.recipe.PARTS_FILE


def _lexical_weight(run: Path) -> float:
    """The run's `lexical.weight` (its router.json's config; else configs/train.yaml's)."""
    import json

    info = run / "router" / "router.json"
    if info.exists():
        return float(json.loads(info.read_text())["config"]["lexical"]["weight"])
    from training.config import load_train_config

    return float(load_train_config("configs/train.yaml", []).lexical.weight)


def blended_routers(run: Path, oof: pd.DataFrame, weights: list[float], cs: list[float], fixed: tuple[float, float]
                    ) -> tuple[dict[str, pd.DataFrame], list[dict]] | None:
    """{name: n × models probabilities indexed by example id} for the fixed and the inner-fold blends, and the
    per-fold choices; None without the category branch's parts."""
    path = run / PARTS_FILE
    if not path.exists():
        return None
    parts = dict(np.load(path))
    if "category" not in parts:
        return None
    ids, models, fold = [str(e) for e in parts["example_ids"]], [str(m) for m in parts["models"]], parts["fold"]
    cands = {c: parts[f"category_c{c:g}"] for c in cs if f"category_c{c:g}" in parts}
    if not cands:  # a run without per-C parts: its one C is the fixed one
        cands = {fixed[1]: parts["category"]}
    correct = oof.pivot_table(index="example_id", columns="model", values="correct", aggfunc="first")
    correct = correct.reindex(ids)[models]
    mask = correct.notna().to_numpy()
    y = np.where(mask, correct.fillna(False).to_numpy(dtype=float), 0.0)
    base = blend(parts["head"], parts["lexical"], _lexical_weight(run))
    choice = inner_fold_choices(base, cands, y, mask, fold, weights)
    inner = np.full(base.shape, np.nan)
    for f, (c, w, _) in choice.items():
        rows = fold == f
        inner[rows] = blend(base[rows], cands[c][rows], w)
    fixed_cat = cands.get(fixed[1], parts["category"])
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))
    frame = lambda z: pd.DataFrame(sig(z), index=ids, columns=models)
    return ({f"fixed: weight {fixed[0]:g}, C {fixed[1]:g}": frame(blend(base, fixed_cat, fixed[0])),
             "inner-fold choice": frame(inner)},
            [{"fold": f, "c": c, "weight": w, "log_loss": round(loss, 4)} for f, (c, w, loss) in choice.items()])


def _aligned_parts(run: Path, data: RoutingData, c: float = 1.0) -> tuple[np.ndarray, np.ndarray] | None:
    """(head ⊕ lexical logits, the category part at C `c`), rows and columns in `data`'s order; None without
    the category branch's parts."""
    path = run / PARTS_FILE
    parts = dict(np.load(path)) if path.exists() else {}
    if "category" not in parts:
        return None
    ids = {str(e): i for i, e in enumerate(parts["example_ids"])}
    models = [str(m) for m in parts["models"]]
    rows, cols = [ids[e] for e in data.example_ids], [models.index(m) for m in data.models]
    base = blend(parts["head"], parts["lexical"], _lexical_weight(run))
    cat = parts.get(f"category_c{c:g}", parts["category"])
    return base[np.ix_(rows, cols)], cat[np.ix_(rows, cols)]


def aligned_choice(base: np.ndarray, category: np.ndarray, data: RoutingData, target: str,
                   weights: tuple[float, ...] = WEIGHT_GRID, cost_fraction: float = 0.1) -> tuple[np.ndarray, dict]:
    """Held-out model choice per row with the category weight and λ chosen jointly on the training folds by
    the target itself: for each weight, λ as `choose_tau` picks it on the training rows; then, of those (weight,
    λ) pairs, the cheapest whose training accuracy reaches the best single model's (target "match_best"; none:
    the most accurate), or the most accurate within `cost_fraction` × the best single's cost ("cost_fraction";
    none: the cheapest). Logits `base` (head ⊕ lexical) and `category`, rows aligned with `data`. Only training
    rows' labels are read for a fold's choice. Returns (choice per row, fold -> (weight, λ))."""
    probs = {w: sigmoid(blend(base, category, w)) for w in weights}  # every row once; folds pick their rows
    choice, picks = np.zeros(len(base), dtype=int), {}
    for k in data.fold_ids:
        test = data.folds == k
        train = ~test
        costs = profiled_costs(data, train)
        correct, cost = data.correct[train], data.cost[train]
        best = outcome_of(np.full(int(train.sum()), best_single_column(correct, cost)), correct, cost)
        points = []
        for w in weights:
            lam = choose_tau(probs[w][train], correct, cost, costs, target=target, cost_fraction=cost_fraction,
                             rule="lambda")
            points.append(((w, lam), outcome_of(choose_batch_lambda(probs[w][train], costs, lam), correct, cost)))
        budget = cost_fraction * best.usd_per_million if target == "cost_fraction" else None
        w, lam = best_point(points, best, "budget" if budget is not None else target, budget)
        picks[k] = (float(w), float(lam))
        choice[test] = choose_batch_lambda(probs[w][test], costs, lam)
    return choice, picks


def held_out_data(run: Path, models: list[str] | None = None, labels: Path | None = None,
                  examples: Path | None = None) -> tuple[RoutingData, pd.DataFrame]:
    """(RoutingData of a run's held-out rows, its out-of-fold predictions): the run's folds, its labels and
    examples (or `labels` / `examples`), for `models` (default: those of the out-of-fold predictions)."""
    oof = pd.read_parquet(run / "oof_predictions.parquet")
    folds = {e: int(f) for e, f in oof.drop_duplicates("example_id").set_index("example_id")["fold"].items() if f >= 0}
    models = list(dict.fromkeys(oof["model"])) if models is None else models
    exs = {e.id: e for e in read_examples(examples or run / "examples.parquet")}
    data = RoutingData.from_labels([lb for lb in read_labels(labels or run / "labels.parquet")
                                    if lb.example_id in folds and lb.model in models], exs, models, folds)
    return data, oof


def prior_gap(run: Path, labels: Path | None = None, examples: Path | None = None, *,
              weights: list[float] | None = None, cs: list[float] | None = None) -> list[dict]:
    data, oof = held_out_data(run, labels=labels, examples=examples)
    probs, _ = oof_matrix(oof, data.example_ids, data.models)
    routers, choices = {"router": probs}, None
    extra = blended_routers(run, oof, list(weights or WEIGHT_GRID), list(cs or C_GRID), (0.5, 1.0))
    if extra is not None:
        blends, choices = extra
        for name, p in blends.items():
            p = p.reindex(data.example_ids)[data.models].to_numpy()
            same = [k for k, q in routers.items() if np.allclose(p, q, rtol=0, atol=1e-9)]
            if same:
                routers[f"{same[0]} (= {name})"] = routers.pop(same[0])
            else:
                routers[name] = p
    prior = category_prior_probs(data.categories, data.correct, data.folds)
    rows = np.arange(len(probs))
    fixed = next((k for k in routers if "fixed" in k), None)
    out = []
    aligned = _aligned_parts(run, data)
    for target, what in TARGETS:
        res = {name: evaluate_router(name, p, data, target=target, rule="lambda")
               for name, p in (*routers.items(), ("category prior", prior))}
        per = {name: (data.correct[rows, r.choice], data.cost[rows, r.choice]) for name, r in res.items()}
        picks = {}
        if aligned is not None:
            choice, picks = aligned_choice(*aligned, data, target)
            per = per | {"λ-aligned weight": (data.correct[rows, choice], data.cost[rows, choice])}
        ci = paired_bootstrap(per, reference="category prior")
        vs_fixed = paired_bootstrap(per, reference=fixed) if fixed else {}
        acc = lambda n, per=per: per[n][0].mean()
        usd = lambda n, per=per: per[n][1].mean() * 1e6
        for name in [n for n in per if n != "category prior"]:
            r = ci[name]
            row = {"run": str(run), "target": what, "variant": name,
                   "router": f"{acc(name):.3f} [{r.accuracy.low:.3f}, {r.accuracy.high:.3f}] at ${usd(name):,.0f}/M",
                   "category prior": f"{acc('category prior'):.3f} at ${usd('category prior'):,.0f}/M",
                   "Δ accuracy": f"{acc(name) - acc('category prior'):+.3f} "
                                 f"[{r.delta_accuracy.low:+.3f}, {r.delta_accuracy.high:+.3f}]",
                   "Δ $/M": f"{usd(name) - usd('category prior'):+,.0f} "
                            f"[{r.delta_usd_per_million.low:+,.0f}, {r.delta_usd_per_million.high:+,.0f}]",
                   "reached": r.reaches}
            if fixed and name != fixed:
                v = vs_fixed[name]
                row["vs fixed: Δ accuracy"] = (f"{acc(name) - acc(fixed):+.3f} "
                                               f"[{v.delta_accuracy.low:+.3f}, {v.delta_accuracy.high:+.3f}]")
                row["vs fixed: Δ $/M"] = (f"{usd(name) - usd(fixed):+,.0f} "
                                          f"[{v.delta_usd_per_million.low:+,.0f}, {v.delta_usd_per_million.high:+,.0f}]")
            if name == "λ-aligned weight":
                row["weight per fold"] = ", ".join(f"{w:g}" for w, _ in picks.values())
            out.append(row)
    if choices is not None:
        for row in out:
            row["choices"] = choices
    return out


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    from evaluation.report import _md

    rows = [row for a in argv for row in prior_gap(Path(a))]
    for run in dict.fromkeys(r["run"] for r in rows):
        ch = next((r.get("choices") for r in rows if r["run"] == run), None)
        if ch:
            print(f"{run}: inner-fold choices " + "; ".join(f"fold {c['fold']}: C {c['c']:g}, weight {c['weight']:g}"
                                                          for c in ch))
    print(_md(pd.DataFrame([{k: v for k, v in r.items() if k != "choices"} for r in rows]).fillna("")))


if __name__ == "__main__":
    main(sys.argv[1:])
