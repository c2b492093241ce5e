"""The router against the bar it has to clear: the category prior, paired on the same held-out queries.

    .venv/bin/python -m evaluation.prior_gap RUN_DIR [RUN_DIR ...]   # each: a reproduce / train run (oof + labels)

For each run: the router's λ rows and the category prior's (BFCL's category known, its rates from the training
folds; `evaluation.category_prior`) at the report's two single-model targets (best-single accuracy; ≤ 10% of
its cost), each with its 95% bootstrap interval and the paired difference router − prior (accuracy, $/M).
"Reached" means the accuracy difference's interval is not all below 0 and the router costs no more than the
prior (its cost difference's interval is not all above 0). Every number is held out (docs/metrics.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from data.schema import read_examples, read_labels
from evaluation.category_prior import category_prior_probs
from evaluation.report import oof_matrix
from evaluation.routing_eval import RoutingData, evaluate_router
from evaluation.stats import paired_bootstrap

TARGETS = (("match_best", "best-single accuracy"), ("cost_fraction", "≤ 10% of best-single cost"))


def prior_gap(run: Path, labels: Path | None = None, examples: Path | None = None) -> list[dict]:
    oof = pd.read_parquet(run / "oof_predictions.parquet")
    folds = {e: int(f) for e, f in oof.drop_duplicates("example_id").set_index("example_id")["fold"].items() if f >= 0}
    models = list(dict.fromkeys(oof["model"]))
    exs = {e.id: e for e in read_examples(examples or run / "examples.parquet")}
    held = set(folds)
    data = RoutingData.from_labels([lb for lb in read_labels(labels or run / "labels.parquet")
                                    if lb.example_id in held and lb.model in models], exs, models, folds)
    probs, _ = oof_matrix(oof, data.example_ids, data.models)
    prior = category_prior_probs(data.categories, data.correct, data.folds)
    rows = np.arange(len(probs))
    out = []
    for target, what in TARGETS:
        res = {name: evaluate_router(name, p, data, target=target, rule="lambda")
               for name, p in (("router", probs), ("category prior", prior))}
        per = {name: (data.correct[rows, r.choice], data.cost[rows, r.choice]) for name, r in res.items()}
        ci = paired_bootstrap(per, reference="category prior")
        r = ci["router"]
        out.append({"run": str(run), "target": what,
                    "router": f"{per['router'][0].mean():.3f} "
                              f"[{r.accuracy.low:.3f}, {r.accuracy.high:.3f}] at ${per['router'][1].mean() * 1e6:,.0f}/M",
                    "category prior": f"{per['category prior'][0].mean():.3f} at ${per['category prior'][1].mean() * 1e6:,.0f}/M",
                    "Δ accuracy": f"{per['router'][0].mean() - per['category prior'][0].mean():+.3f} "
                                  f"[{r.delta_accuracy.low:+.3f}, {r.delta_accuracy.high:+.3f}]",
                    "Δ $/M": f"{(per['router'][1].mean() - per['category prior'][1].mean()) * 1e6:+,.0f} "
                             f"[{r.delta_usd_per_million.low:+,.0f}, {r.delta_usd_per_million.high:+,.0f}]",
                    "reached": bool(r.delta_accuracy.high >= 0 and r.delta_usd_per_million.low <= 0)})
    return out


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    from evaluation.report import _md

    print(_md(pd.DataFrame([row for a in argv for row in prior_gap(Path(a))])))


if __name__ == "__main__":
    main(sys.argv[1:])
