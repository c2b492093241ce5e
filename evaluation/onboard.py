"""Onboarding a new model from a few hundred unlabelled requests, measured offline.

    python -m evaluation.onboard --run-dir runs/default --model gpt-3.5-turbo-0125-FC --model ... \
        [--sizes 50 100 200 400] [--draws 3] [--gate 1.645] [--out docs-table.md]
    python -m evaluation.onboard --run-dir runs/default --screen --out runs/screen.json   # truth arm, every model

For a model X outside the pool: the pool (labels known as below on every query) plus X, whose answers are
known on only N probe queries. What X is worth is the change in the policy's held-out outcome when X joins
the menu, at each target (a budget of 20% of the best single model's cost: accuracy gain; best-single
accuracy: cost saving). Two ways of onboarding X, each against its own no-X baseline:

- **truth**: the verifier's labels on all 1,630 queries, for X and the pool (what a benchmark user has);
- **consensus, N probes**: consensus labels only (`data.consensus`, no expected answers) — the pool's from the
  pool's answers on every query, X's from everyone's answers on N random probe queries (X is "not asked"
  elsewhere, so its vote and label exist only there).

The targets are given, not read off labels (`--targets given`, the default): the budget is the pool's
truth-fit budget in USD per query (20% of the cost of the pool's best single model by the true labels, per
fold), the same number in every arm with and without X; "best-single accuracy" is the accuracy of the pool's
best single model (by each arm's labels), which X cannot become. `--targets labels` reads both off each arm's
fit labels with X among the candidates, so adding X could move a target without X ever being called.

Policy: the best fixed strategy for the target (`evaluation.strategy_eval`: every single model and
agreement cascade with resolve rules, chosen on the training folds, run on every query of the test fold).
On the training folds a strategy that calls X is estimated (accuracy, cost, resolve rules, X's profiled cost)
on the probe queries only; the others on every training query. Held-out outcomes are scored with the true
labels on the same folds as the router's. Kept value = consensus value / truth value; intervals: 95%
bootstrap over queries (paired), outcomes averaged over the probe draws. `--screen`: the truth arm alone for
every recorded model outside the pool (`evaluation.onboard_screen`). `--gate Z`: extra rows where a strategy
calling X is adopted only on a significant paired advantage; `--probe-labels truth`: the same probe draws with
X's true labels (a diagnostic); `--impute K [--rectify]`: X's behaviour off its probes imputed from the pool's
answers on every training query (`evaluation.onboard_impute`). Every consensus run also has two reference
arms — X on every query, with its true or its consensus labels, added to the pool's consensus labels — so a
share can be read with the pool's labels held fixed (`kept_of`; `--no-references`: without). Results:
docs/onboarding.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from evaluation.strategies import RULE_TOLERANCES, CascadeData, Simulated, menu_of, simulate, unpack

TARGETS = (("cost_fraction", 0.2), ("match_best", None))
# Arms that hold the pool's consensus labels fixed and add the new model in full: what the consensus arms are
# also compared with (`onboard_model(references=True)`), against the same consensus no-new-model baseline.
REFERENCE = "reference"
REF_TRUTH = f"{REFERENCE}: pool consensus, X true labels on all queries"
REF_CONSENSUS = f"{REFERENCE}: pool consensus, X consensus labels on all queries"
# The ceiling of the other reading (the pool keeps its true labels, only X is consensus-labelled): against the
# truth baseline, so its `kept` is a share of the truth arm; not a reference (no consensus arm is a share of it).
TRUTH_POOL_X_CONSENSUS = "truth pool, X consensus labels on all queries"


def choose_fixed(acc: np.ndarray, cost: np.ndarray, singles: np.ndarray, target: str, fraction: float | None,
                 budget: float | None = None) -> int:
    """The spec best for `target` given per-spec training estimates: best single = the most accurate of
    `singles` (the specs that may anchor the target; ties: cheaper); match_best: the cheapest spec at least as
    accurate (else the most accurate); cost_fraction: the most accurate spec within `budget` USD per query
    (given), else within `fraction` × the best single's cost (ties: cheaper; nothing fits: the cheapest)."""
    s = np.flatnonzero(singles)
    j = s[np.lexsort((cost[s], -acc[s]))[0]]
    if target == "match_best":
        ok = np.flatnonzero(acc >= acc[j] - 1e-12)
        return int(ok[np.argmin(cost[ok])])
    limit = budget if budget is not None else fraction * cost[j]
    ok = np.flatnonzero(cost <= limit + 1e-15)
    return int(ok[np.lexsort((cost[ok], -acc[ok]))[0]]) if len(ok) else int(np.argmin(cost))


def columns(cd: CascadeData, cols: list[int]) -> CascadeData:
    """`cd` restricted to some models (columns)."""
    d = cd.data
    data = replace(d, models=[d.models[c] for c in cols], correct=d.correct[:, cols], cost=d.cost[:, cols])
    ix = np.ix_(range(len(d.example_ids)), cols, cols)
    return CascadeData(data, cd.agree[ix], cd.latency[:, cols], {m: cd.latency_known.get(m, 0) for m in data.models},
                       None if cd.kinds is None else cd.kinds[ix])


def with_labels(cd: CascadeData, fit: np.ndarray, test: np.ndarray) -> CascadeData:
    """Fit labels everywhere but the test rows (true labels there: what scores them)."""
    return replace(cd, data=replace(cd.data, correct=np.where(test[:, None], cd.data.correct, fit)))


def _merge(a: Simulated, b: Simulated, cols_a: np.ndarray, cols_b: np.ndarray, s: int) -> Simulated:
    n = len(a.correct)
    out = Simulated(np.zeros((n, s), bool), np.zeros((n, s)), np.zeros((n, s)), np.zeros((n, s), int), np.zeros((n, s), bool))
    for src, cols in ((a, cols_a), (b, cols_b)):
        for f in ("correct", "cost", "latency", "calls", "escalated"):
            getattr(out, f)[:, cols] = getattr(src, f)
        out.rules.update({int(cols[k]): r for k, r in src.rules.items()})
    return out


def held_out_fixed(cd: CascadeData, fit: np.ndarray, *, gate: float | None = None, **kw
                   ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """held_out_fixed_gates with one gate (None: no gate)."""
    return held_out_fixed_gates(cd, fit, gates=(gate,), **kw)[gate]


def held_out_fixed_gates(cd: CascadeData, fit: np.ndarray, *, probe: np.ndarray | None = None, new: int | None = None,
                         rules: tuple[float, ...] = RULE_TOLERANCES, cache: dict | None = None, paired: bool = True,
                         budgets: dict[int, float] | None = None, anchor_models: int | None = None,
                         gates: tuple[float | None, ...] = (None,), x_menu: str = "all") -> dict[float | None, dict]:
    """Per target: (correct, cost) per query of the best fixed strategy, chosen per fold on `fit` labels of the
    training folds and scored with `cd`'s true labels on the test fold. With `probe` (bool, n) and `new` (a
    column), the specs that call model `new` are estimated on the probe training rows only. `cache`: the
    simulations of the specs without `new`, per fold, shared by calls whose other columns of `fit` are equal.
    `paired`: estimate the new model's specs by their paired difference from the incumbent on the probes
    (below); else by their plain mean on the probes.

    The targets: `budgets` (fold -> USD per query) makes the cost target a given budget, which no label moves;
    else it is 20% of the cost of the best single model read off `fit`. `anchor_models`: only the first this
    many columns can be that best single model (the one "best-single accuracy" means), so a new model cannot
    move the target; default every column. A gate (a one-sided z, with `paired`; None: no gate): a spec calling
    the new model replaces the incumbent only where its paired advantage on the probe rows is significant —
    accuracy gain (≤ budget), or accuracy kept and cost saved (best-single accuracy) — at that z; else the
    incumbent stays. `x_menu="small"` (with probes and `paired`): of the specs calling the new model only
    small_x_menu(incumbent) — single(new) and the incumbent with `new` in one of its roles — may be chosen (and only those are simulated). Returns gate -> target -> (correct,
    cost): each gate from the same simulations."""
    if x_menu not in ("all", "small"):
        raise ValueError(f"x_menu must be 'all' or 'small', got {x_menu!r}")
    m = len(cd.data.models)
    specs, uses_new, anchors = menu_roles(m, rules if cd.kinds is not None else (), new, anchor_models)
    small = x_menu == "small" and probe is not None and new is not None
    if small and not paired:
        raise ValueError("x_menu='small' needs the paired estimator (its menu is built from the incumbent)")
    index = {s: i for i, s in enumerate(specs)}
    n = len(cd.data.example_ids)
    outs = {g: {t: (np.zeros(n, bool), np.zeros(n)) for t, _ in TARGETS} for g in gates}
    for k in cd.data.fold_ids:
        test = cd.data.folds == k
        train = np.flatnonzero(~test)
        cdk = with_labels(cd, fit, test)
        costs = cd.data.cost[train].mean(axis=0)
        budget = None if budgets is None else budgets[k]
        if probe is None or new is None:
            sim = simulate(cdk, specs, costs, fit_rows=train)
            acc, paid = sim.correct[train].mean(axis=0), sim.cost[train].mean(axis=0)
        else:
            ptrain = np.flatnonzero(~test & probe)
            if len(ptrain) == 0:
                raise ValueError(f"fold {k}: no probe query among the training rows; draw more probes")
            costs[new] = cd.data.cost[ptrain, new].mean()
            a_cols, b_cols = np.flatnonzero(~uses_new), np.flatnonzero(uses_new)
            sa = cache.get(k) if cache is not None else None
            if sa is None:
                sa = simulate(cdk, [specs[i] for i in a_cols], costs, fit_rows=train)
                if cache is not None:
                    cache[k] = sa
            if small:  # the incumbents come from the pool's specs alone: simulate only their small menus
                acc_a, paid_a = np.full(len(specs), -np.inf), np.full(len(specs), np.inf)
                acc_a[a_cols], paid_a[a_cols] = sa.correct[train].mean(axis=0), sa.cost[train].mean(axis=0)
                allowed = {t: [index[x] for x in small_x_menu(
                    specs[choose_fixed(acc_a, paid_a, anchors & ~uses_new, t, f, budget if t == "cost_fraction"
                                       else None)], new, rules if cd.kinds is not None else ()) if x in index]
                           for t, f in TARGETS}
                b_cols = np.array(sorted({i for v in allowed.values() for i in v}), int)
            sb = simulate(cdk, [specs[i] for i in b_cols], costs, fit_rows=ptrain)
            sim = _merge(sa, sb, a_cols, b_cols, len(specs))
            acc = np.where(uses_new, sim.correct[ptrain].mean(axis=0), sim.correct[train].mean(axis=0))
            paid = np.where(uses_new, sim.cost[ptrain].mean(axis=0), sim.cost[train].mean(axis=0))
        for t, f in TARGETS:
            b = budget if t == "cost_fraction" else None
            if probe is not None and new is not None and paired:
                # Paired (control-variate) estimates: a spec that calls the new model is measured on the probes
                # *against* the incumbent (the best spec without it), and that difference is added to the
                # incumbent's estimate on every training row. The same rows on both sides: far less noise.
                pool_acc = np.where(uses_new, -np.inf, acc)
                ref = choose_fixed(pool_acc, np.where(uses_new, np.inf, paid), anchors & ~uses_new, t, f, b)
                d_acc = sim.correct[ptrain].mean(axis=0) - sim.correct[ptrain, ref].mean()
                d_paid = sim.cost[ptrain].mean(axis=0) - sim.cost[ptrain, ref].mean()
                est_acc = np.where(uses_new, acc[ref] + d_acc, acc)
                est_paid = np.where(uses_new, paid[ref] + d_paid, paid)
                if small:  # only the incumbent's small menu may call the new model
                    off = uses_new.copy()
                    off[allowed[t]] = False
                    est_acc, est_paid = np.where(off, -np.inf, est_acc), np.where(off, np.inf, est_paid)
                j0 = choose_fixed(est_acc, est_paid, anchors, t, f, b)
                slack = acc[ref] - _anchor_accuracy(acc, paid, anchors)
                picks = {g: ref if g is not None and uses_new[j0] and not significant(sim, ptrain, j0, ref, t, g, slack)
                         else j0 for g in gates}
            else:
                picks = dict.fromkeys(gates, choose_fixed(acc, paid, anchors, t, f, b))
            for g, j in picks.items():
                outs[g][t][0][test], outs[g][t][1][test] = sim.correct[test, j], sim.cost[test, j]
    return outs


def menu_roles(m: int, rules: tuple[float, ...], new: int | None, anchor_models: int | None
               ) -> tuple[list[tuple], np.ndarray, np.ndarray]:
    """The fixed-strategy menu over `m` models (menu_of), which specs call model `new` (None: none), and which
    may anchor the targets: the single models among the first `anchor_models` columns (None: every one)."""
    specs = menu_of(m, rules=rules)
    parts = [unpack(s) for s in specs]
    uses_new = np.array([new is not None and new in u[:4] for u in parts])
    limit = m if anchor_models is None else anchor_models
    anchors = np.array([u[0] == u[1] and u[0] < limit for u in parts])
    return specs, uses_new, anchors


def small_x_menu(incumbent: tuple, new: int, rules: tuple[float, ...] = RULE_TOLERANCES) -> list[tuple]:
    """The specs calling model `new` that a small menu offers next to `incumbent` (a spec without it):
    single(new), and the incumbent with `new` in place of one of its models — either agreeing model, the
    tie-breaker, or the escalation — the others kept, each without and with every resolve-rule tolerance in
    `rules` (a single incumbent j: agree(j, new → j) and agree(j, new → new)). At most 1 + 4 × (1 + len(rules))
    specs, in menu_of's form (the agreeing pair in ascending order)."""
    a, b, t, e, _ = unpack(incumbent)
    if new in (a, b, t, e):
        raise ValueError(f"the incumbent {incumbent} already calls model {new}")
    if a == b:
        swaps = [(a, new, None, a), (a, new, None, new)]
    else:
        swaps = [(new, b, t, e), (a, new, t, e), *([(a, b, new, e)] if t is not None else []), (a, b, t, new)]
    out = [(new, new, None, new)]
    for x, y, tb, esc in swaps:
        spec = (min(x, y), max(x, y), tb, esc)
        out += [spec, *((*spec, tol) for tol in rules)]
    return out


def _anchor_accuracy(acc: np.ndarray, paid: np.ndarray, anchors: np.ndarray) -> float:
    s = np.flatnonzero(anchors)
    return float(acc[s[np.lexsort((paid[s], -acc[s]))[0]]])


def significant(sim: Simulated, rows: np.ndarray, j: int, ref: int, target: str, z: float, slack: float) -> bool:
    """Whether spec j beats the incumbent `ref` on `rows` (paired, one-sided at `z` standard errors): for the
    cost target, a higher accuracy; for best-single accuracy, a lower cost with its accuracy no more than
    `slack` (the incumbent's margin over the target accuracy) below the incumbent's."""
    def lower(x: np.ndarray) -> float:  # the mean's one-sided lower confidence bound
        return float(x.mean() - z * x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else -np.inf

    d_acc = sim.correct[rows, j].astype(float) - sim.correct[rows, ref]
    if target == "cost_fraction":
        return lower(d_acc) > 0
    return lower(sim.cost[rows, ref] - sim.cost[rows, j]) > 0 and lower(d_acc) >= -slack


@dataclass
class Onboarding:
    model: str
    values: dict[str, dict]  # arm ("truth", "consensus N=…") -> target -> value with interval


def value_table(base: dict, arms: dict[str, list[dict]], *, resamples: int = 2000, seed: int = 0) -> dict:
    """Per arm and target: the held-out value (≤ 20%: accuracy gain; match_best: cost saving in $/M) against
    the arm's baseline, its 95% interval, and the share of the truth arm's value kept (with its interval), all
    on the same bootstrap resamples; also both changes (accuracy and $/M, with intervals), since a cost saving
    bought with accuracy, or a gain with money, is not the target's value. `base`: arm -> target -> (correct, cost) without the new model;
    `arms`: arm -> one such dict per probe draw (averaged per query)."""
    idx = None
    res: dict = {}

    def boot(v):
        return np.asarray(v, float)[idx].mean(axis=1)

    for arm, draws in arms.items():
        res[arm] = {}
        for t, _ in TARGETS:
            ok = np.mean([d[t][0] for d in draws], axis=0)
            paid = np.mean([d[t][1] for d in draws], axis=0)
            b_ok, b_paid = base["truth" if arm.startswith("truth") else "consensus"][t]
            if idx is None:
                idx = np.random.default_rng(seed).integers(0, len(ok), size=(resamples, len(ok)))
            v = (ok - b_ok) if t == "cost_fraction" else (b_paid - paid) * 1e6
            res[arm][t] = {"value": float(v.mean()), "samples": boot(v), "accuracy": float(ok.mean()),
                           "usd_per_million": float(paid.mean() * 1e6), "baseline_accuracy": float(b_ok.mean()),
                           "baseline_usd_per_million": float(b_paid.mean() * 1e6)}
            for name, change in (("accuracy_change", ok - b_ok), ("usd_per_million_change", (paid - b_paid) * 1e6)):
                res[arm][t][name] = float(change.mean())
                res[arm][t][name + "_ci"] = [float(x) for x in np.percentile(boot(change), [2.5, 97.5])]
    refs = [a for a in res if a.startswith(REFERENCE)]
    for arm in res:
        for t, _ in TARGETS:
            r = res[arm][t]
            r["kept"], r["kept_ci"] = _share(r, res["truth"][t])
            if not arm.startswith("truth"):  # a consensus arm against each reference arm (but itself)
                r["kept_of"] = {ref: dict(zip(("kept", "kept_ci"), _share(r, res[ref][t])))
                                for ref in refs if ref != arm}
            r["value_ci"] = [float(x) for x in np.percentile(r["samples"], [2.5, 97.5])]
    for arm in res:
        for t, _ in TARGETS:
            res[arm][t].pop("samples")
    return res


def _share(r: dict, of: dict) -> tuple[float, list[float]]:
    """r's value as a share of `of`'s, with its 95% interval on the same bootstrap resamples."""
    if not of["value"]:
        return float("nan"), [np.nan, np.nan]
    with np.errstate(divide="ignore", invalid="ignore"):
        kept = r["samples"] / of["samples"]
    return float(r["value"] / of["value"]), [float(x) for x in np.nanpercentile(kept, [2.5, 97.5])]


def priced_entry(recordings: Path, price_file, model: str):
    """A pool entry for a recorded model, priced from the price file the way `switchcraft pool sample` does."""
    from data.pool import PoolModel, load_price_table, open_weight_prices
    from data.pool_sample import recorded_style

    prices = load_price_table(price_file).get(model) or open_weight_prices(price_file).get(model)
    if prices is None:
        raise ValueError(f"{model}: no price in {price_file} (pick a priced recording)")
    if not (recordings / model).is_dir():
        raise ValueError(f"{model}: no recordings under {recordings}")
    return PoolModel(name=model, prompt_style=recorded_style(recordings / model), prices=prices)


@dataclass
class PoolState:
    """The pool's side, computed once for every new model: its CascadeData (true labels), who declined, and the
    targets. `given_targets` (the default): the cost target is the budget in USD per query that the pool's
    best single model by the true labels gives (20% of its cost on each fold's training rows), the same number
    for every arm, with or without a new model, and the best-single-accuracy target is anchored on the pool's
    models only — so neither a new model nor consensus labels can move a target. Without it, both targets are
    read off each arm's own fit labels, the new model included (the first onboarding tables did that)."""

    run_dir: Path
    pool: object
    examples: dict
    folds: dict[str, int]
    cd: CascadeData
    declined: np.ndarray
    calls: list[list[list]]
    given_targets: bool = True
    base: dict | None = None  # the no-new-model arms, computed on first use
    fit: np.ndarray | None = None  # the pool's consensus labels, computed on first use
    caches: dict = field(default_factory=lambda: {"truth": {}, "consensus": {}})  # the pool's simulations per arm

    def consensus_fit(self) -> np.ndarray:
        """The pool's consensus labels (from the pool's answers alone)."""
        from data.consensus import fit_consensus

        if self.fit is None:
            self.fit = fit_consensus(self.cd.agree, declined=self.declined).correct
        return self.fit

    def targets(self) -> dict:
        """held_out_fixed's target arguments (see the class)."""
        if not self.given_targets:
            return {}
        return {"budgets": pool_budgets(self.cd), "anchor_models": len(self.pool.names)}

    def baseline(self) -> dict:
        if self.base is None:
            self.base = {"truth": held_out_fixed(self.cd, self.cd.data.correct, **self.targets()),
                         "consensus": held_out_fixed(self.cd, self.consensus_fit(), **self.targets())}
        return self.base


def pool_budgets(cd: CascadeData) -> dict[int, float]:
    """Per fold: the cost target's budget in USD per query — the truth-fit policy's, as
    `evaluation.consensus_eval.given_budget` gives it to the consensus-fit rows."""
    from evaluation.consensus_eval import given_budget

    return {k: given_budget(cd, k, dict(TARGETS)["cost_fraction"]) for k in cd.data.fold_ids}


def pool_state(run_dir: Path, pool_path="configs/pool.yaml", *, given_targets: bool = True) -> PoolState:
    import pandas as pd

    from data.consensus import answers_of_outputs
    from data.pool import load_pool
    from data.schema import read_examples, read_labels, read_outputs
    from evaluation.routing_eval import RoutingData
    from training.recipe import OOF_FILE

    pool = load_pool(pool_path)
    examples = {e.id: e for e in read_examples(run_dir / "examples.parquet")}
    outputs = read_outputs(run_dir / "outputs.parquet", models=[m.recording for m in pool.models])
    folds = pd.read_parquet(run_dir / OOF_FILE).drop_duplicates("example_id").set_index("example_id")["fold"]
    folds = {e: int(f) for e, f in folds.items() if f >= 0}
    labels = read_labels(run_dir / "labels.parquet")
    have = {lb.model for lb in labels}
    lacking = {m.recording for m in pool.models if m.name not in have}
    if lacking:  # a pool other than the run's (e.g. drawn with `switchcraft pool sample`): label it here
        from data.labels import label_outputs

        labels = [*labels, *label_outputs([o for o in outputs if o.model in lacking], examples, pool)]
    data = RoutingData.from_labels(labels, examples, pool.names, folds)
    cd = CascadeData.from_outputs(outputs, examples, pool, data)
    row = {e: i for i, e in enumerate(data.example_ids)}
    calls = [[None] * len(pool.names) for _ in row]
    for r in answers_of_outputs(outputs, pool):
        if r["example_id"] in row:
            calls[row[r["example_id"]]][pool.names.index(r["model"])] = r["calls"]
    declined = np.array([[not c for c in rc] for rc in calls], dtype=bool)
    return PoolState(run_dir, pool, examples, folds, cd, declined, calls, given_targets)


def with_model(st: PoolState, entry, outputs) -> tuple[CascadeData, np.ndarray]:
    """The pool's CascadeData plus one model (last column): its true labels, costs, agreement with each pool
    model (and the kind of each disagreement); and `declined` likewise."""
    from data.consensus import answers_of_outputs
    from data.labels import label_outputs
    from data.pool import Pool
    from data.verify import language_of
    from data.verify.agree import DISAGREEMENT_KINDS, calls_agree, disagreement_kind
    from evaluation.strategies import MIRROR

    cd, d = st.cd, st.cd.data
    pool9 = Pool(models=[*st.pool.models, entry])
    labels = {lb.example_id: lb for lb in label_outputs(outputs, st.examples, pool9)}
    answers = {r["example_id"]: r["calls"] for r in answers_of_outputs(outputs, pool9)}
    missing = [e for e in d.example_ids if e not in labels]
    if missing:
        raise ValueError(f"{entry.name}: no recorded output for {len(missing)} queries, e.g. {missing[:3]}")
    n, m = d.correct.shape
    agree = np.zeros((n, m + 1, m + 1), bool)
    kinds = np.zeros((n, m + 1, m + 1), np.int8)
    agree[:, :m, :m], kinds[:, :m, :m] = cd.agree, cd.kinds
    agree[:, m, m] = True
    code = {k: i + 1 for i, k in enumerate(DISAGREEMENT_KINDS)}
    for i, e in enumerate(d.example_ids):
        ex, new = st.examples[e], answers[e]
        lang = language_of(ex)
        for j in range(m):
            agree[i, j, m] = agree[i, m, j] = calls_agree(ex.tools, st.calls[i][j], new, language=lang)
            if not agree[i, j, m]:
                kind = disagreement_kind(ex.tools, st.calls[i][j], new, language=lang)
                kinds[i, j, m], kinds[i, m, j] = code[kind], code[MIRROR.get(kind, kind)]
    cost_new = np.array([np.nan if labels[e].cost_usd is None else labels[e].cost_usd for e in d.example_ids])
    cost_new = np.where(np.isnan(cost_new), np.nanmean(cost_new), cost_new)
    data = replace(d, models=[*d.models, entry.name],
                   correct=np.c_[d.correct, [labels[e].correct for e in d.example_ids]], cost=np.c_[d.cost, cost_new])
    seconds = {o.example_id: o.latency_s for o in outputs if o.latency_s is not None}
    lat = np.c_[cd.latency, [seconds.get(e, np.nan) for e in d.example_ids]]
    cd9 = CascadeData(data, agree, lat, {**cd.latency_known, entry.name: len(seconds)}, kinds)
    declined = np.c_[st.declined, [not answers[e] for e in d.example_ids]]
    return cd9, declined


def new_model(st: PoolState, model: str, *, price_file=None, recordings=None) -> tuple[CascadeData, np.ndarray, object]:
    """The pool plus one recorded model (its recording must be in `<run_dir>/outputs.parquet`): (CascadeData,
    declined, its pool entry)."""
    from data.config import load_data_config
    from data.schema import read_outputs

    cfg = load_data_config("configs/data.yaml")
    if model in st.pool.names:
        raise ValueError(f"{model} is already in the pool")
    entry = priced_entry(Path(recordings or cfg.output_path("bfcl_v1")), price_file or cfg.output_path("prices"), model)
    outputs = read_outputs(st.run_dir / "outputs.parquet", models=[entry.recording])
    if not outputs:
        raise ValueError(f"{model}: no outputs in {st.run_dir / 'outputs.parquet'} (reproduce imports every recording)")
    cd9, declined = with_model(st, entry, outputs)
    return cd9, declined, entry


def truth_arm(st: PoolState, cd9: CascadeData) -> dict:
    """The new model (last column) added with every true label. Run as a probe set of every row with plain
    means — the same choices as without probes — so the pool's simulations are shared by every new model."""
    m = len(st.pool.names)
    return held_out_fixed(cd9, cd9.data.correct, probe=np.ones(len(cd9.data.example_ids), bool), new=m,
                          cache=st.caches["truth"], paired=False, **st.targets())


def describe(model: str, entry, data, m: int) -> dict:
    return {"model": model, "prices": entry.prices.model_dump(exclude_none=True), "prompt_style": entry.prompt_style,
            "true_accuracy": float(data.correct[:, m].mean()), "usd_per_million": float(data.cost[:, m].mean() * 1e6)}


def onboard_model(st: PoolState, model: str, *, sizes=(50, 100, 200, 400), draws: int = 3, price_file=None,
                  recordings=None, seed: int = 0, paired: bool = True, gates: tuple[float | None, ...] = (None,),
                  probe_labels: str = "consensus", x_menus: tuple[str, ...] = ("all",), impute: int | None = None,
                  rectify: bool | str = False, relabel: bool = False, split_terms: bool = False, references: bool = True,
                  pool_labels: str = "consensus", probe_design: str = "random", log=print) -> dict:
    """Everything above for one new model: its recording must be in `<run_dir>/outputs.parquet`. `gates`: the
    consensus arm with each gate (held_out_fixed_gates; None: none), all on the same probe draws.
    `probe_labels="truth"`: a diagnostic arm instead — the same probe draws (same seed, sizes, draws), but the
    new model's *true* labels on them (and the pool's true labels), against the truth baseline: what N probes
    give with perfect labels, so the consensus arm's shortfall splits into probe count and label quality.
    `x_menus`: the menus of specs calling the new model ("all"; "small": small_x_menu), each a row of its own on
    the same probe draws. `impute` K: instead, one row per size with the new model's behaviour imputed off its
    probes (K copies; `evaluation.onboard_impute`; `rectify`: corrected by the probes, True or "shrink" the
    default form, "ppi" PPI++), on the same
    probe draws. `references` (consensus probes only): two more arms, each the new model added on every query
    to the pool's consensus labels — with its true labels (REF_TRUTH) and with its consensus labels
    (REF_CONSENSUS) — against the consensus no-new-model policy. They hold the pool's labels fixed, so each
    consensus arm's share of them (`kept_of`) is what onboarding from the probes loses, apart from what the
    pool's consensus labels already cost (the truth arm's `kept` mixes both). With them, TRUTH_POOL_X_CONSENSUS:
    X's consensus labels on every query added to the pool's *true* labels, against the truth baseline — what
    consensus labels allow X when only X lacks ground truth (its `kept` is a share of the truth arm).
    `pool_labels="truth"`: the probe arms keep the pool's *true* labels (only X is consensus-labelled, on its
    probes), against the truth baseline — the reading where the pool is labelled as in the truth arm; their
    names start "truth pool, ". `probe_design="contested"` (with `impute`): the probes drawn where the pool
    disagrees (`evaluation.onboard_impute.contested_probes`) and weighted by their inverse inclusion
    probabilities; "random" (default): uniformly."""
    if probe_labels not in ("consensus", "truth"):
        raise ValueError(f"probe_labels must be 'consensus' or 'truth', got {probe_labels!r}")
    if pool_labels not in ("consensus", "truth"):
        raise ValueError(f"pool_labels must be 'consensus' or 'truth', got {pool_labels!r}")
    if probe_design not in ("random", "contested"):
        raise ValueError(f"probe_design must be 'random' or 'contested', got {probe_design!r}")
    if probe_design == "contested" and not impute:
        raise ValueError("contested probes are weighted by the imputation's estimators: they need impute")
    if split_terms and not impute:
        raise ValueError("split_terms belong to the imputation's choice model: they need impute")
    if relabel and (not impute or probe_labels != "consensus"):
        raise ValueError("relabel redoes the imputed consensus labels: it needs impute and consensus probe labels")
    from data.consensus import fit_consensus

    cd9, declined, entry = new_model(st, model, price_file=price_file, recordings=recordings)
    data = cd9.data
    log(f"{model}: agreement with the pool done")
    m = len(st.pool.names)
    base = st.baseline()
    fit8 = st.consensus_fit()
    arms = {"truth": [truth_arm(st, cd9)]}
    log(f"{model}: truth arm done")
    rng = np.random.default_rng(seed)
    n = len(data.example_ids)
    if references and probe_labels == "consensus":
        every = np.ones(n, bool)
        x_consensus = fit_consensus(cd9.agree, np.ones((n, m + 1), bool), declined).correct[:, m]
        for name, x_fit in ((REF_TRUTH, data.correct[:, m]), (REF_CONSENSUS, x_consensus)):
            arms[name] = [held_out_fixed(cd9, np.c_[fit8, x_fit], probe=every, new=m, cache=st.caches["consensus"],
                                         paired=False, **st.targets())]
        arms[TRUTH_POOL_X_CONSENSUS] = [held_out_fixed(cd9, np.c_[data.correct[:, :m], x_consensus], probe=every,
                                                       new=m, cache=st.caches["truth"], paired=False, **st.targets())]
        log(f"{model}: reference arms done")

    def arm(size, g, menu):
        head = f"consensus N={size}" if probe_labels == "consensus" else f"truth, N={size} probes"
        if pool_labels == "truth" and probe_labels == "consensus":
            head = f"truth pool, {head}"
        if impute:
            return (head + f", imputed K={impute}" + (", rectified" if rectify else "")
                    + (" (PPI++)" if rectify == "ppi" else "")
                    + (", relabelled" if relabel else "") + (", split terms" if split_terms else "")
                    + (", contested probes" if probe_design == "contested" else ""))
        return head + ("" if menu == "all" else f", {menu} X menu") + ("" if g is None else f", gate z={g:g}")

    irng = np.random.default_rng([seed, 22])  # the imputations' own stream: the probe draws stay the same
    # The pool's labels in the probe arms, and which cache of the pool's simulations they share.
    pool_fit = data.correct[:, :m] if pool_labels == "truth" else fit8
    cache_key = "truth" if probe_labels == "truth" or pool_labels == "truth" else "consensus"
    if probe_design == "contested":
        from evaluation.onboard_impute import contested_probes, split_of

        pool_split = split_of(cd9.agree[:, :m, :m])  # from the pool's answers only: the same for every draw

    for size in sizes:
        arms |= {arm(size, g, menu): [] for menu in x_menus for g in gates} if not impute else {arm(size, None, "all"): []}
        for _ in range(draws):
            probe_weight = None
            if probe_design == "contested":
                probe, probe_weight = contested_probes(pool_split, size, m, rng)
            else:
                probe = np.zeros(n, bool)
                probe[rng.choice(n, size=min(size, n), replace=False)] = True
            answered = np.ones((n, m + 1), bool)
            answered[~probe, m] = False
            # The pool keeps its own consensus labels; the new model's come from everyone's answers on its probes.
            if probe_labels == "truth":  # off the probes the new model's labels are never read
                fit9 = data.correct
            else:
                fit9 = np.c_[pool_fit, fit_consensus(cd9.agree, answered, declined).correct[:, m]]
            if impute:
                from evaluation.onboard_impute import held_out_imputed

                arms[arm(size, None, "all")].append(held_out_imputed(
                    cd9, fit9, probe=probe, new=m, pool_labels=fit9[:, :m], declined=declined, copies=impute,
                    rng=irng, cache=st.caches[cache_key], rectify=rectify, relabel=relabel,
                    split_terms=split_terms, probe_weight=probe_weight, **st.targets()))
                continue
            for menu in x_menus:
                outs = held_out_fixed_gates(cd9, fit9, probe=probe, new=m, cache=st.caches[cache_key],
                                            paired=paired, gates=gates, x_menu=menu, **st.targets())
                for g, out in outs.items():
                    arms[arm(size, g, menu)].append(out)
        log(f"{model}: N={size} done")
    return {**describe(model, entry, data, m), "draws": draws, "seed": seed,
            "estimator": "paired" if paired else "probe means", "gates": list(gates),
            "probe_labels": probe_labels, "references": references, "x_menus": list(x_menus), "impute": impute,
            "rectify": rectify, "relabel": relabel, "split_terms": split_terms, "pool_labels": pool_labels,
            "probe_design": probe_design,
            "targets": "given" if st.given_targets else "labels",
            "values": value_table(base, arms)}


def markdown(results: list[dict]) -> list[str]:
    """The onboarding table: per new model and labels, each target's held-out outcome, its value against the
    same labels' no-new-model policy, and the share of the truth value kept (only where the truth value's
    interval excludes 0: with no value to keep, a share means nothing)."""
    lines = ["| new model (accuracy, $/M) | labels | ≤ 20%: accuracy, $/M | accuracy gain [95% CI] | kept [95% CI] | "
             "best-single acc.: accuracy, $/M | Δ accuracy [95% CI] | $/M saved [95% CI] | kept [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        truth = r["values"]["truth"]
        for arm, v in r["values"].items():
            cells = []
            for t, fmt in (("cost_fraction", "{:+.4f}"), ("match_best", "{:+,.0f}")):
                x = v[t]
                lo, hi = truth[t]["value_ci"]
                kept = ("—" if arm == "truth" else "n/a (truth value n.s.)" if lo <= 0 <= hi
                        else f"{x['kept']:.0%} [{x['kept_ci'][0]:.0%}, {x['kept_ci'][1]:.0%}]")
                value = f"{fmt.format(x['value'])} [{fmt.format(x['value_ci'][0])}, {fmt.format(x['value_ci'][1])}]"
                cells.append(f"{x['accuracy']:.3f}, {x['usd_per_million']:,.0f}")
                if t == "match_best" and "accuracy_change" in x:  # a saving bought with accuracy shows here
                    lo_a, hi_a = x["accuracy_change_ci"]
                    cells.append(f"{x['accuracy_change']:+.4f} [{lo_a:+.4f}, {hi_a:+.4f}]")
                elif t == "match_best":
                    cells.append("")
                cells += [value, kept]
            name = f"{r['model']} ({r['true_accuracy']:.3f}, {r['usd_per_million']:,.0f})"
            lines.append(f"| {name} | {arm} | " + " | ".join(cells) + " |")
    return lines + reference_markdown(results)


def reference_markdown(results: list[dict]) -> list[str]:
    """Each consensus arm's value as a share of the reference arms' (the pool's consensus labels held fixed)."""
    rows = [(r["model"], arm, v) for r in results for arm, v in r["values"].items() if "kept_of" in v["cost_fraction"]]
    refs = sorted({ref for _, _, v in rows for ref in v["cost_fraction"]["kept_of"]})
    if not rows or not refs:
        return []
    head = " | ".join(f"{t}: of {ref.split(': ', 1)[1]}" for t in ("≤ 20% kept", "best-single kept") for ref in refs)
    lines = ["", f"| new model | labels | {head} |", "|---|---|" + "---|" * (2 * len(refs))]

    def cell(k):
        return "—" if k is None else f"{k['kept']:.0%} [{k['kept_ci'][0]:.0%}, {k['kept_ci'][1]:.0%}]"

    for model, arm, v in rows:
        cells = [cell(v[t]["kept_of"].get(ref)) for t in ("cost_fraction", "match_best") for ref in refs]
        lines.append(f"| {model} | {arm} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, default=Path("runs/default"), help="A reproduce run (all models imported).")
    p.add_argument("--model", action="append", help="A recorded model outside the pool (repeat; with --screen, "
                   "default: every recorded model outside the pool).")
    p.add_argument("--pool", default="configs/pool.yaml")
    p.add_argument("--screen", action="store_true", help="The truth arm only: each model's value with all true labels.")
    p.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 400])
    p.add_argument("--draws", type=int, default=3, help="Random probe sets per size.")
    p.add_argument("--seed", type=int, default=0, help="Seed of the probe draws.")
    p.add_argument("--estimator", choices=("paired", "probe"), default="paired",
                   help="How a strategy calling the new model is estimated on the probes: its paired difference from "
                   "the incumbent (default), or its plain mean.")
    p.add_argument("--gate", type=float, nargs="+", metavar="Z", help="Also: adopt a strategy calling the new model only "
                   "when its paired advantage over the incumbent on the probes is significant at this one-sided z "
                   "(e.g. 1.645); each gate is a row of its own, on the same probe draws as the ungated one.")
    p.add_argument("--targets", choices=("given", "labels"), default="given",
                   help="given (default): the pool's truth-fit budget in USD and the pool's best single model, the "
                   "same in every arm; labels: both read off each arm's fit labels, the new model included.")
    p.add_argument("--probe-labels", choices=("consensus", "truth"), default="consensus",
                   help="truth: a diagnostic — the same probe draws with the new model's true labels.")
    p.add_argument("--x-menu", choices=("all", "small"), nargs="+", default=["all"],
                   help="The strategies calling the new model that the probes choose among: all (default), or small "
                   "(single(X) and the incumbent with X in place of one of its models); several: a row each, "
                   "on the same probe draws.")
    p.add_argument("--impute", type=int, metavar="K", help="Instead: the new model's behaviour off its probes imputed "
                   "from the pool's answers (evaluation.onboard_impute), K copies per fold; one row per size.")
    p.add_argument("--rectify", nargs="?", const="shrink", default=None, choices=("shrink", "ppi"),
                   help="With --impute: correct each imputed estimate by the "
                   "probes' residual: shrink (the default: the imputed mean + λ × the probes' residual) or ppi (PPI++: the "
                   "probes' mean + λ × (imputed mean − imputed probe mean)); docs/onboarding.md.")
    p.add_argument("--relabel", action="store_true", help="With --impute: the new model's imputed labels from the "
                   "consensus of every model's answers, its imputed one included (as its probe labels are).")
    p.add_argument("--split-terms", action="store_true", help="With --impute: the choice model also fits how much "
                   "more X sides with the consensus on contested queries, and a lone answer where the pool is "
                   "unanimous.")
    p.add_argument("--pool-labels", choices=("consensus", "truth"), default="consensus",
                   help="truth: the probe arms keep the pool's true labels (only the new model is "
                   "consensus-labelled), against the truth baseline.")
    p.add_argument("--probe-design", choices=("random", "contested"), default="random",
                   help="With --impute: contested draws the probes where the pool's answers disagree (weighted "
                   "back by their inclusion probabilities); random (default): uniformly.")
    p.add_argument("--no-references", action="store_true", help="Skip the two reference arms (the new model on "
                   "every query, on the pool's consensus labels).")
    p.add_argument("--out", type=Path, help="Write the results (JSON) here, and the table beside it (.md).")
    a = p.parse_args(argv)
    if not a.model and not a.screen:
        p.error("--model is required (or --screen)")
    st = pool_state(a.run_dir, a.pool, given_targets=a.targets == "given")
    print(f"pool state of {a.run_dir} ready", flush=True)

    def write(results, table):
        if a.out:  # after each model: a long run keeps what it has
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(results, indent=2))
            a.out.with_suffix(".md").write_text("\n".join(table(results)) + "\n")

    if a.screen:
        from evaluation.onboard_screen import outside_models, screen, screen_markdown

        results = []
        for model in a.model or outside_models(st):
            results += screen(st, [model])
            write(results, screen_markdown)
        print("\n".join(screen_markdown(results)), flush=True)
        return
    results = []
    for model in a.model:
        results.append(onboard_model(st, model, sizes=tuple(a.sizes), draws=a.draws, seed=a.seed,
                                     paired=a.estimator == "paired", gates=(None, *(a.gate or ())),
                                     probe_labels=a.probe_labels, x_menus=tuple(a.x_menu), impute=a.impute,
                                     rectify=a.rectify, relabel=a.relabel, split_terms=a.split_terms,
                                     references=not a.no_references, pool_labels=a.pool_labels,
                                     probe_design=a.probe_design))
        print("\n".join(markdown(results[-1:])), flush=True)
        write(results, markdown)


if __name__ == "__main__":  # pragma: no cover
    main()
