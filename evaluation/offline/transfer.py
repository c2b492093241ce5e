"""Transfer: a router (and its strategy policy) trained on one run's queries, scored on another run's.

    switchcraft transfer --train-run runs/v3 --test-run runs/nexus               # BFCL v3 → NexusBench
    switchcraft transfer --train-run runs/nexus --test-run runs/v3               # NexusBench → BFCL v3
    switchcraft transfer --train-run runs/v3 --test-run runs/v3 --split live_    # non-live → live, BFCL v3

    from evaluation.offline.transfer import load_side, transfer, write_transfer
    result = transfer(load_side("runs/v3"), load_side("runs/nexus"))
    write_transfer(result, "runs/transfer/v3_to_nexus")      # transfer.md, transfer.csv, per_category.csv

A run is a `switchcraft reproduce` run folder: examples.parquet, labels.parquet (labels.json names the pool),
oof_predictions.parquet, router/ and outputs.parquet. Only the models both pools share are routed: the
transferred router's probabilities are restricted to those columns, and so is everything on the test side.
Every row is scored on the test side's labelled queries, in its folds; intervals are 95% bootstrap over those
queries, paired with the test side's best single model (`evaluation.offline.stats`).

Rows:
- the transferred router, τ as trained: τ chosen on the train side's out-of-fold predictions (shared models,
  every train row) for each target, models ordered by the router's own cost profile: nothing of the test side;
- the transferred router, τ on the test side's training folds (`routing_eval.evaluate_router`, exactly as the
  evaluation calibrates its own router): the weights never saw a test label, the threshold did;
- the transferred strategy policy, when router.json has one: its menu, regressions and λ as trained, the
  strategies that call a model outside the shared ones dropped, run on the test side's recorded outputs
  (`training.policy.simulate.run_rows`: its agreement checks on the test side's decoded calls);
- the test side's own router (its held-out predictions, shared columns), τ calibrated the same way;
- the test side's best single and cheapest model (chosen on its training folds), and the oracle.

With `--split PREFIX` the train side is retrained first on its categories not starting with PREFIX
(`split_router`, into <out>/train) and the test side keeps only those that do: non-live → live on BFCL v3.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from data.errors import DataError
from data.pool import Pool, load_pool
from data.schema import Example, Label, read_examples, read_labels, read_outputs, write_examples, write_labels
from evaluation.offline.markdown import markdown_table
from evaluation.offline.routing_eval import RoutingData, choose_tau, evaluate_router, oof_matrix, references
from evaluation.offline.routing_metrics import oracle_choice
from evaluation.offline.stats import paired_bootstrap
from serving.policy import choose_batch

BEST = "best single model (test side)"
# (target, what the row name says): the evaluation's two router targets.
TARGETS = (("match_best", "best-single accuracy"), ("cost_fraction", "≤ 10% of best-single cost"))


@dataclass
class Side:
    """One run's labelled queries: examples, labels of its pool (pool order), held-out folds and predictions."""

    run: Path
    examples: dict[str, Example]
    labels: list[Label]
    models: list[str]
    pool: Pool | None
    oof: pd.DataFrame  # training.recipe.OOF_FILE: example_id, fold, model, prob

    def data(self, models: list[str]) -> RoutingData:
        folds = self.oof.drop_duplicates("example_id").set_index("example_id")["fold"].astype(int).to_dict()
        folds = {e: f for e, f in folds.items() if f >= 0 and e in self.examples}
        return RoutingData.from_labels([lb for lb in self.labels if lb.model in set(models)], self.examples, models, folds)


def load_side(run: str | Path, *, keep: Callable[[str], bool] | None = None) -> Side:
    """A reproduce run's files; `keep(category)` keeps only those queries (e.g. BFCL v3's live ones)."""
    run = Path(run)
    need = [run / f for f in ("examples.parquet", "labels.parquet", "oof_predictions.parquet")]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise DataError(f"not a reproduce run: no {', '.join(missing)}", path=run,
                        hint="make it with: switchcraft reproduce --pool POOL --run-dir " + str(run))
    examples = {e.id: e for e in read_examples(run / "examples.parquet") if keep is None or keep(e.category)}
    labels = [lb for lb in read_labels(run / "labels.parquet") if lb.example_id in examples]
    pool_path = json.loads((run / "labels.json").read_text()).get("pool") if (run / "labels.json").exists() else None
    pool = load_pool(pool_path) if pool_path and Path(pool_path).exists() else None
    labelled = {lb.model for lb in labels}
    models = [m for m in pool.names if m in labelled] if pool else sorted(labelled)
    return Side(run, examples, labels, models, pool, pd.read_parquet(run / "oof_predictions.parquet"))


@dataclass
class Row:
    name: str
    correct: np.ndarray  # bool per test query
    cost: np.ndarray  # USD per test query
    param: str = ""
    short: str | None = None  # its column in the per-category table (None: not there)


@dataclass
class TransferResult:
    train_run: Path
    test_run: Path
    shared: list[str]
    categories: np.ndarray
    rows: list[Row]
    context: dict = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        ci = paired_bootstrap({r.name: (r.correct, r.cost) for r in self.rows}, reference=BEST)
        best = next(r for r in self.rows if r.name == BEST)
        out = []
        for r in self.rows:
            c = ci[r.name]
            out.append({"routing": r.name, "accuracy": r.correct.mean(), "accuracy_ci_low": c.accuracy.low,
                        "accuracy_ci_high": c.accuracy.high, "usd_per_million": r.cost.mean() * 1e6,
                        "usd_per_million_ci_low": c.usd_per_million.low, "usd_per_million_ci_high": c.usd_per_million.high,
                        "delta_accuracy": r.correct.mean() - best.correct.mean(), "delta_accuracy_ci_low": c.delta_accuracy.low,
                        "delta_accuracy_ci_high": c.delta_accuracy.high,
                        "cost_share_of_best": r.cost.mean() / best.cost.mean() if best.cost.mean() > 0 else float("nan"),
                        "vs_best_single": "reference" if r.name == BEST else c.verdict(), "param": r.param})
        return pd.DataFrame(out)

    def per_category(self) -> pd.DataFrame:
        """Per test category: the accuracy of each row with a short name, and the first one's Δ vs the best single
        (paired 95% interval over that category's queries)."""
        rows = [r for r in self.rows if r.short]
        best, lead = next(r for r in self.rows if r.name == BEST), rows[0]
        out = []
        for cat in sorted(set(self.categories.tolist())):
            idx = np.flatnonzero(self.categories == cat)
            d = paired_bootstrap({"lead": (lead.correct[idx], lead.cost[idx]), "best": (best.correct[idx], best.cost[idx])},
                                 reference="best", resamples=1000)["lead"].delta_accuracy
            out.append({"category": cat, "n": len(idx), **{r.short: float(r.correct[idx].mean()) for r in rows},
                        f"Δ {lead.short} − best [95% CI]": f"{lead.correct[idx].mean() - best.correct[idx].mean():+.3f} "
                                                          f"[{d.low:+.3f}, {d.high:+.3f}]"})
        return pd.DataFrame(out)


def transfer(train: Side, test: Side, router_dir: str | Path | None = None, *, router=None) -> TransferResult:
    """Score the train side's router (`router_dir`, default <train run>/router; or a loaded `router`) on the
    test side's queries over the models both pools share (see the module docstring for the rows)."""
    from training.router import load_router

    router = router or load_router(Path(router_dir or train.run / "router"))
    shared = [m for m in test.models if m in set(router.models) and m in set(train.models)]
    if len(shared) < 2:
        raise DataError(f"the pools share {shared or 'no models'}; routing needs two",
                        path=test.run, hint=f"router models: {router.models}; test pool: {test.models}")
    data = test.data(shared)
    ex = [test.examples[e] for e in data.example_ids]
    probs_all = router.predict(ex)  # router.models order
    cols = [router.models.index(m) for m in shared]
    probs = probs_all[:, cols]
    profile = router.cost_profile
    order_costs = np.array([profile.get(m) if profile.get(m) is not None else np.nan for m in shared], dtype=float)
    if np.isnan(order_costs).any():  # no profile recorded: the train side's mean label cost
        order_costs = train.data(shared).cost.mean(axis=0)
    rows: list[Row] = []

    def single(name: str, choice: np.ndarray, param: str = "", short: str | None = None) -> Row:
        i = np.arange(len(choice))
        return Row(name, data.correct[i, choice], data.cost[i, choice], param, short)

    train_data = train.data(shared)
    train_probs, _ = oof_matrix(train.oof, train_data.example_ids, shared)
    taus = {}
    for target, what in TARGETS:
        taus[target] = choose_tau(train_probs, train_data.correct, train_data.cost, train_data.cost.mean(axis=0),
                                  target=target)
        rows.append(single(f"transferred router, τ as trained for {what}", choose_batch(probs, order_costs, taus[target]),
                           f"τ {taus[target]:.2f}", "transferred" if target == "match_best" else None))
    for target, what in TARGETS:
        r = evaluate_router("transferred", probs, data, target=target)
        rows.append(single(f"transferred router, τ on test training folds for {what}", r.choice, _taus(r.taus),
                           "transferred, τ on test" if target == "match_best" else None))
    policy_row = strategy_policy_row(router, probs_all, shared, test, data, profile)
    if policy_row is not None:
        rows.append(policy_row)
    own, _ = oof_matrix(test.oof, data.example_ids, shared)
    for target, what in TARGETS:
        r = evaluate_router("own", own, data, target=target)
        rows.append(single(f"test side's own router (held out), τ for {what}", r.choice, _taus(r.taus),
                           "own router" if target == "match_best" else None))
    refs = references(data)
    rows.append(single(BEST, refs.best_single.choice, data.models[int(np.bincount(refs.best_single.choice).argmax())],
                       "best single"))
    rows.append(single("cheapest model (test side)", refs.cheapest.choice,
                       data.models[int(np.bincount(refs.cheapest.choice).argmax())]))
    rows.append(single("oracle", oracle_choice(data.correct, data.cost), "", "oracle"))
    context = {"train_run": str(train.run), "test_run": str(test.run), "router": str(router_dir or train.run / "router"),
               "shared_models": shared, "router_models": router.models, "test_queries": len(data.example_ids),
               "test_folds": data.fold_ids, "tau_as_trained": taus, "imputed_costs": data.imputed_costs}
    return TransferResult(train.run, test.run, shared, data.categories, rows, context)


def _taus(taus: dict[int, float]) -> str:
    return "τ " + ", ".join(f"{v:.2f}" for v in sorted(set(taus.values())))


def strategy_policy_row(router, probs_all: np.ndarray, shared: list[str], test: Side, data: RoutingData,
                        price: dict) -> Row | None:
    """The router's strategy policy as trained, on the test side's recorded outputs; None without a policy (or
    without the test side's outputs and pool). Strategies calling a model outside `shared` are never chosen."""
    spec = router.info.get("strategy_policy")
    outputs_path = test.run / "outputs.parquet"
    if not spec or test.pool is None or not outputs_path.exists():
        return None
    from training.policy import StrategyPolicy
    from training.policy.simulate import CascadeData, run_rows

    policy = StrategyPolicy.from_json(spec, source=f"{router.info.get('saved', '')} strategy_policy")
    allowed = np.array([set(st.models) <= set(shared) for st in policy.menu])
    if not allowed.any():
        return None
    if policy.models != list(router.models):
        probs_all = probs_all[:, [router.models.index(m) for m in policy.models]]
    util = policy.lam * policy.success(probs_all) - policy.costs[None, :]
    util[:, ~allowed] = -np.inf
    pick = np.argmax(util, axis=1)
    pool = Pool(benchmark=test.pool.benchmark, models=[test.pool.get(m) for m in shared])
    outputs = read_outputs(outputs_path, models=[m.recording for m in pool.models])
    cd = CascadeData.from_outputs(outputs, test.examples, pool, data)
    correct, cost = np.zeros(len(pick), bool), np.zeros(len(pick))
    known = {m: float(price[m]) if price.get(m) is not None else float(data.cost[:, j].mean()) for j, m in enumerate(shared)}
    for k in np.unique(pick):
        idx = np.flatnonzero(pick == k)
        ok, usd, *_ = run_rows(cd.subset(idx), policy.menu[k], known)
        correct[idx], cost[idx] = ok, usd
    return Row("transferred strategy policy, λ as trained", correct, cost, f"λ {policy.lam:.3g} ({spec.get('target', '')})",
               "transferred policy")


def category_filter(prefix: str, *, inside: bool) -> Callable[[str], bool]:
    """Categories starting with `prefix` (a glob when it has * or ?), or (inside=False) every other one."""
    def match(cat: str) -> bool:
        hit = fnmatch.fnmatch(cat, prefix) if any(c in prefix for c in "*?[") else cat.startswith(prefix)
        return hit if inside else not hit
    return match


def split_router(run: str | Path, out: str | Path, prefix: str, *, train_config: str | Path = "configs/train.yaml",
                 overrides: list[str] | None = None) -> Path:
    """Retrain `run`'s router on its categories not starting with `prefix` (k-fold as configured, so the
    τ-as-trained rows have held-out predictions): writes examples, labels, outputs and the router into `out`."""
    from training.config import load_train_config
    from training.recipe import run_training

    run, out = Path(run), Path(out)
    side = load_side(run, keep=category_filter(prefix, inside=False))
    if not side.examples:
        raise DataError(f"no category of {run} is outside {prefix!r}", path=run / "examples.parquet", field="category")
    out.mkdir(parents=True, exist_ok=True)
    write_examples(out / "examples.parquet", side.examples.values())
    write_labels(out / "labels.parquet", side.labels)
    meta = json.loads((run / "labels.json").read_text()) if (run / "labels.json").exists() else {}
    (out / "labels.json").write_text(json.dumps({**meta, "split": f"categories not starting with {prefix!r} of {run}"}))
    if (run / "outputs.parquet").exists():
        from data.schema import write_outputs

        write_outputs(out / "outputs.parquet", [o for o in read_outputs(run / "outputs.parquet") if o.example_id in side.examples])
    cfg = load_train_config(train_config, [f"run_dir={out}", f"labels={out / 'labels.parquet'}",
                                           f"examples={out / 'examples.parquet'}", f"pool={meta.get('pool', 'configs/pool.yaml')}",
                                           "progress=false", *(overrides or [])])
    run_training(cfg)
    return out


def transfer_markdown(result: TransferResult) -> str:
    """The transfer table (intervals inline) and the per-category table, as markdown."""
    t = result.table()

    def iv(v, lo, hi, fmt):
        return f"{fmt.format(v)} [{fmt.format(lo)}, {fmt.format(hi)}]"

    show = pd.DataFrame({
        "routing": t.routing,
        "accuracy [95% CI]": [iv(r.accuracy, r.accuracy_ci_low, r.accuracy_ci_high, "{:.3f}") for r in t.itertuples()],
        "$/M queries [95% CI]": [iv(r.usd_per_million, r.usd_per_million_ci_low, r.usd_per_million_ci_high, "{:,.0f}")
                                 for r in t.itertuples()],
        "Δ acc vs best single [95% CI]": ["reference" if r.routing == BEST else
                                          iv(r.delta_accuracy, r.delta_accuracy_ci_low, r.delta_accuracy_ci_high, "{:+.3f}")
                                          for r in t.itertuples()],
        "cost / best's": [f"{v:.0%}" for v in t.cost_share_of_best],
        "param": t.param,
    })
    cats = result.per_category()
    ctx = result.context
    return "\n".join([
        f"Train {ctx['train_run']} → test {ctx['test_run']}: {ctx['test_queries']:,} test queries, "
        f"{len(result.shared)} shared models ({', '.join(result.shared)}).", "",
        markdown_table(show), "",
        "Per test category (accuracy of each row at its best-single-accuracy target; Δ paired over the category's "
        "queries):", "",
        markdown_table(cats), ""])


def write_transfer(result: TransferResult, out: str | Path) -> Path:
    """transfer.md, transfer.csv, per_category.csv and transfer.json (the context) into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result.table().to_csv(out / "transfer.csv", index=False)
    result.per_category().to_csv(out / "per_category.csv", index=False)
    (out / "transfer.json").write_text(json.dumps(result.context, indent=2, default=str))
    path = out / "transfer.md"
    path.write_text("# Transfer\n\n" + transfer_markdown(result))
    return path
