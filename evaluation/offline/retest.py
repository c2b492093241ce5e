"""How much of the oracle is luck: test–retest agreement of our labels between two BFCL runs.

    switchcraft retest                                      # runs/default/retest/retest.md
    switchcraft retest --run-dir runs/x --earlier ../shared/data/bfcl_v1_pool_outputs_2024-07-25
    .venv/bin/python -m pytest -q tests/evaluation/offline/test_retest.py

The earlier run (`outputs.bfcl_v1_earlier` in configs/data.yaml, BFCL's 2024-07-25
run) answered the same queries as the later one we label (2024-08-11), with
slightly different prompts. For every pool model recorded in both runs we label
the earlier outputs with the same verifier and pool, then compare per query:

- per model: queries in both runs, accuracy in each (on those queries), label
  agreement (share of queries with the same correct/incorrect), Cohen's kappa,
  flips right→wrong (right earlier, wrong later) and wrong→right;
- over the models in both runs and the queries every one of them has in both:
  the oracle (some model right in the later run), the *stable* oracle (some
  model right in both runs) and the either-run oracle, each picking the
  cheapest such model (costs from the later run's labels), and the best single
  model for scale; 95% bootstrap intervals over queries.

Pool models absent from the earlier run are listed, not an error. Rows left out
are counted by stage and reason (`RetestResult.skipped`), never dropped silently.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from data.errors import DataError
from data.labels import label_outputs
from data.pool import Pool
from data.recorded import ImportReport, import_recorded, result_files
from data.schema import Example, Label
from evaluation.offline.markdown import markdown_table
from evaluation.offline.routing_metrics import Outcome, best_single_column, oracle_choice, outcome_of

EARLIER_KEY = "bfcl_v1_earlier"  # configs/data.yaml: outputs.<this>
ORACLES = ("oracle", "stable oracle", "either-run oracle")


@dataclass
class Interval:
    low: float
    high: float


@dataclass
class RetestResult:
    """Everything `retest` measured; the tables are DataFrames, the rest plain values."""

    per_model: pd.DataFrame  # one row per pool model (absent ones too, with in_earlier_run=False)
    oracles: pd.DataFrame  # oracle, stable oracle, either-run oracle, best single: accuracy, $/M, 95% CI
    per_category: pd.DataFrame  # oracle vs stable oracle per category
    skipped: pd.DataFrame  # stage, model, reason, rows
    present: list[str]  # pool models in both runs (pool order)
    absent: list[str]  # pool models with no folder in the earlier run
    n_queries: int  # queries in the oracle comparison (every present model labelled in both runs)
    intervals: dict[str, Interval]  # name -> 95% bootstrap interval of its accuracy
    imputed_costs: dict[str, int] = field(default_factory=dict)  # model -> later-run rows without usage
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)


def earlier_models(earlier_root: str | Path) -> set[str]:
    """Recording folders with BFCL v1 result files under `earlier_root`."""
    root = Path(earlier_root)
    if not root.is_dir():
        raise DataError("no such folder of earlier recordings", path=root,
                        hint=f"pass the earlier run's folder, or set outputs.{EARLIER_KEY} in configs/data.yaml")
    return {model for model, _, _ in result_files(root, "bfcl_v1")}


def cohen_kappa(a: np.ndarray, b: np.ndarray) -> float:
    """Cohen's kappa of two boolean ratings of the same items; NaN when chance agreement is 1
    (both runs constant and equal: agreement is perfect but says nothing)."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    if len(a) == 0:
        return float("nan")
    po = float((a == b).mean())
    pa, pb = float(a.mean()), float(b.mean())
    pe = pa * pb + (1 - pa) * (1 - pb)
    return float("nan") if pe >= 1.0 else (po - pe) / (1 - pe)


def bootstrap_interval(hits: np.ndarray, idx: np.ndarray, level: float = 0.95) -> Interval:
    """Percentile interval of the mean of `hits` over resampled rows `idx` (resamples × n)."""
    means = np.asarray(hits, float)[idx].mean(axis=1)
    q = (1 - level) / 2
    return Interval(float(np.quantile(means, q)), float(np.quantile(means, 1 - q)))


def _per_model(pool: Pool, absent: list[str], now: dict, then: dict, skipped: Counter) -> pd.DataFrame:
    """Each pool model's labels in both runs: accuracy then and now, agreement, kappa, flips either way."""
    rows = []
    for pm in pool.models:
        if pm.name in absent:
            rows.append({"model": pm.name, "in_earlier_run": False})
            continue
        ids_now = {e for e, m in now if m == pm.name}
        ids_then = {e for e, m in then if m == pm.name}
        both = sorted(ids_now & ids_then)
        skipped[("per model", pm.name, "labelled in the later run only")] += len(ids_now - ids_then)
        skipped[("per model", pm.name, "labelled in the earlier run only")] += len(ids_then - ids_now)
        a = np.array([then[(e, pm.name)].correct for e in both], bool)  # earlier
        b = np.array([now[(e, pm.name)].correct for e in both], bool)  # later
        rows.append({
            "model": pm.name, "in_earlier_run": True, "queries_both": len(both),
            "accuracy_earlier": float(a.mean()) if len(both) else float("nan"),
            "accuracy_later": float(b.mean()) if len(both) else float("nan"),
            "agreement": float((a == b).mean()) if len(both) else float("nan"),
            "kappa": cohen_kappa(a, b),
            "right_to_wrong": int((a & ~b).sum()), "wrong_to_right": int((~a & b).sum()),
        })
    per_model = pd.DataFrame(rows, columns=["model", "in_earlier_run", "queries_both", "accuracy_earlier",
                                            "accuracy_later", "agreement", "kappa", "right_to_wrong", "wrong_to_right"])
    counts = ["queries_both", "right_to_wrong", "wrong_to_right"]
    per_model[counts] = per_model[counts].astype("Int64")  # whole numbers; absent models' are <NA>
    return per_model


def retest(
    examples: Mapping[str, Example],
    pool: Pool,
    labels_now: Sequence[Label],
    earlier_root: str | Path,
    *,
    resamples: int = 1000,
    seed: int = 0,
    progress: bool = False,
) -> RetestResult:
    """Compare `labels_now` (the later run, labelled) with the earlier run's outputs under `earlier_root`."""
    t0 = time.perf_counter()
    in_earlier = earlier_models(earlier_root)
    present = [m for m in pool.models if m.recording in in_earlier]
    absent = [m.name for m in pool.models if m.recording not in in_earlier]
    skipped: Counter = Counter()  # (stage, model, reason) -> rows
    for name in absent:
        skipped[("earlier run", name, "model absent from the earlier run")] += 1
    if not present:
        raise DataError("no pool model is recorded in the earlier run", path=earlier_root,
                        hint=f"pool recordings: {', '.join(m.recording for m in pool.models)}")

    report = ImportReport()
    outputs = import_recorded(earlier_root, layout="bfcl_v1", examples=dict(examples),
                              models=[m.recording for m in present], report=report, progress=progress)
    by_recording = {m.recording: m.name for m in present}
    for (recording, reason), n in report.skipped.items():
        skipped[("import earlier", by_recording.get(recording, recording), reason)] += n
    labels_then = label_outputs(outputs, dict(examples), pool)

    now = {(lb.example_id, lb.model): lb for lb in labels_now}
    then = {(lb.example_id, lb.model): lb for lb in labels_then}
    per_model = _per_model(pool, absent, now, then, skipped)

    names = [m.name for m in present]
    all_now = {e for e, _ in now}
    ids = sorted(e for e in all_now if all((e, m) in now and (e, m) in then for m in names))
    for e in (all_now | {e for e, _ in then}) - set(ids):
        # Counted once per query, under the run that lacks it (the later one first) and the models it lacks.
        lacking = [m for m in names if (e, m) not in now]
        run = "later" if lacking else "earlier"
        lacking = lacking or [m for m in names if (e, m) not in then]
        skipped[("oracle", ", ".join(lacking), f"query not labelled in the {run} run for every model in both")] += 1
    if not ids:
        raise DataError("no query is labelled in both runs for every pool model present in both",
                        hint="check that the later labels and the earlier recordings answer the same examples")

    correct_now = np.array([[now[(e, m)].correct for m in names] for e in ids], bool)
    correct_then = np.array([[then[(e, m)].correct for m in names] for e in ids], bool)
    cost, imputed, notes = _costs(now, ids, names)
    stable, either = correct_now & correct_then, correct_now | correct_then
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ids), size=(resamples, len(ids)))
    best = best_single_column(correct_now, np.nan_to_num(cost))
    rows, intervals = [], {}
    for name, matrix in zip(ORACLES, (correct_now, stable, either)):
        hits = matrix.any(axis=1)
        intervals[name] = bootstrap_interval(hits, idx)
        rows.append(_oracle_row(name, _cheapest_correct(matrix, cost), hits, intervals[name]))
    for name, matrix in ((f"best single ({names[best]}), later run", correct_now),
                         (f"best single ({names[best]}), right in both", stable)):
        hits = matrix[:, best]
        intervals[name] = bootstrap_interval(hits, idx)
        rows.append(_oracle_row(name, Outcome(float(hits.mean()), float(np.nanmean(cost[:, best]))), hits, intervals[name]))
    gap = correct_now.any(axis=1).astype(float) - stable.any(axis=1)
    intervals["oracle - stable oracle"] = bootstrap_interval(gap, idx)
    oracles = pd.DataFrame(rows)

    cats = np.array([examples[e].category if e in examples else e.split(":")[-1].rsplit("_", 1)[0] for e in ids])
    per_category = pd.DataFrame([
        {"category": c, "queries": int((cats == c).sum()),
         "oracle": float(correct_now[cats == c].any(axis=1).mean()),
         "stable_oracle": float(stable[cats == c].any(axis=1).mean()),
         "either_run_oracle": float(either[cats == c].any(axis=1).mean())}
        for c in sorted(set(cats.tolist()))
    ])
    skipped_df = pd.DataFrame([{"stage": s, "model": m, "reason": r, "rows": n}
                               for (s, m, r), n in sorted(skipped.items()) if n],
                              columns=["stage", "model", "reason", "rows"])
    settings = {"earlier_root": str(earlier_root), "resamples": resamples, "seed": seed,
                "earlier_outputs": len(outputs), "earlier_labels": len(labels_then),
                "seconds": round(time.perf_counter() - t0, 2)}
    return RetestResult(per_model, oracles, per_category, skipped_df, names, absent, len(ids), intervals,
                        imputed, notes, settings)


def _costs(now: Mapping[tuple[str, str], Label], ids: list[str], names: list[str]) -> tuple[np.ndarray, dict, list]:
    """Later-run costs (n × k); a row without usage takes its model's mean known cost (as in routing_eval).
    A model with no recorded cost at all leaves the costs unknown (NaN), said in a note."""
    cost = np.array([[np.nan if (c := now[(e, m)].cost_usd) is None else c for m in names] for e in ids], float)
    unknown = np.isnan(cost)
    never = [m for j, m in enumerate(names) if unknown[:, j].all()]
    if never:
        return np.full_like(cost, np.nan), {}, [f"no recorded cost for {never}: costs of the oracles are unknown"]
    imputed = {m: int(unknown[:, j].sum()) for j, m in enumerate(names) if unknown[:, j].any()}
    return np.where(unknown, np.nanmean(cost, axis=0, keepdims=True), cost), imputed, []


def _cheapest_correct(correct: np.ndarray, cost: np.ndarray) -> Outcome:
    if np.isnan(cost).any():
        return Outcome(float(correct.any(axis=1).mean()), float("nan"))
    return outcome_of(oracle_choice(correct, cost), correct, cost)


def _oracle_row(name: str, o: Outcome, hits: np.ndarray, ci: Interval) -> dict:
    return {"routing": name, "queries": int(len(hits)), "accuracy": o.accuracy, "ci_low": ci.low, "ci_high": ci.high,
            "usd_per_million": o.usd_per_million}


# --- rendering ----------------------------------------------------------------


def retest_markdown(result: RetestResult) -> str:
    o = result.oracles.set_index("routing")["accuracy"]
    gap = result.intervals["oracle - stable oracle"]
    lines = [
        "## Test–retest: how much of the oracle is luck\n",
        f"Earlier run: `{result.settings.get('earlier_root')}`. Pool models in both runs: "
        f"{', '.join(result.present)}; absent from the earlier run ({len(result.absent)}): "
        f"{', '.join(result.absent) or 'none'}.\n",
        "### Per model (queries labelled in both runs)\n",
        markdown_table(result.per_model[result.per_model["in_earlier_run"]].drop(columns="in_earlier_run")),
        f"\n### Oracles over the {len(result.present)} models in both runs ({result.n_queries:,} queries)\n",
        markdown_table(result.oracles),
        f"\nOracle − stable oracle: {o['oracle'] - o['stable oracle']:.3f} "
        f"(95% CI {gap.low:.3f}–{gap.high:.3f}; {result.settings.get('resamples')} bootstrap resamples over queries, "
        f"seed {result.settings.get('seed')}). Cost: cheapest model right (in the later run / in both / in either), "
        "priced with the later run's usage.\n",
        _luck_line(result),
        "### Per category\n",
        markdown_table(result.per_category),
    ]
    if result.imputed_costs:
        lines.append(f"\nRows without recorded usage, priced at the model's mean: {result.imputed_costs}.\n")
    lines += [f"\n{n}\n" for n in result.notes]
    if len(result.skipped):
        lines += ["\n### Rows left out\n", markdown_table(result.skipped)]
    return "\n".join(lines)


def _luck_line(result: RetestResult) -> str:
    """The oracle's gain over the best single model, and how much of it is not repeatable."""
    acc = result.oracles["accuracy"].to_numpy()
    oracle, stable, best = acc[0], acc[1], acc[3]
    gain = oracle - best
    if gain <= 0:
        return "The oracle gains nothing over the best single model here.\n"
    return (f"The oracle's gain over the best single model (later run): {gain:.3f}; {oracle - stable:.3f} of it "
            f"({(oracle - stable) / gain:.0%}) is right in the later run only, i.e. not repeatable.\n")


def plot_retest(result: RetestResult, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pm = result.per_model[result.per_model["in_earlier_run"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(len(pm))
    left.bar(x - 0.2, pm["agreement"], 0.4, label="label agreement")
    left.bar(x + 0.2, pm["kappa"].fillna(0.0), 0.4, label="Cohen's kappa")
    left.set_xticks(x, pm["model"], rotation=20, ha="right", fontsize=8)
    left.set_ylim(0, 1)
    left.set_title("per model: same label in both runs")
    left.legend(fontsize=8, loc="lower left")
    orc = result.oracles
    acc = orc["accuracy"].to_numpy()
    err = np.vstack([acc - orc["ci_low"].to_numpy(), orc["ci_high"].to_numpy() - acc])
    right.bar(np.arange(len(orc)), acc, yerr=err, capsize=4, color=["C2", "C1", "C0", "grey", "silver"][: len(orc)])
    right.set_xticks(np.arange(len(orc)), [r.replace(", ", ",\n") for r in orc["routing"]], rotation=20, ha="right", fontsize=7)
    right.set_ylim(min(0.5, float(orc["ci_low"].min()) - 0.05), 1)
    right.set_title(f"oracles, {result.n_queries:,} queries (95% bootstrap CI)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_retest(result: RetestResult, out_dir: str | Path) -> Path:
    """Write retest.csv (per model), retest_oracles.csv, retest.json, retest.md and retest.png; returns retest.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result.per_model.to_csv(out / "retest.csv", index=False)
    result.oracles.to_csv(out / "retest_oracles.csv", index=False)
    payload = {
        "present": result.present, "absent": result.absent, "n_queries": result.n_queries,
        "per_model": _records(result.per_model), "oracles": _records(result.oracles),
        "per_category": _records(result.per_category), "skipped": _records(result.skipped),
        "intervals": {k: [v.low, v.high] for k, v in result.intervals.items()},
        "imputed_costs": result.imputed_costs, "notes": result.notes, "settings": result.settings,
    }
    (out / "retest.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    plot_retest(result, out / "retest.png")
    md = out / "retest.md"
    md.write_text(retest_markdown(result), encoding="utf-8")
    return md


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON-safe dicts (NaN → null)."""
    return json.loads(df.to_json(orient="records"))


# --- from a run directory -------------------------------------------------------


def run_retest(
    run_dir: str | Path = "runs/default",
    *,
    data_config: str | Path = "configs/data.yaml",
    pool_path: str | Path = "configs/pool.yaml",
    earlier: str | Path | None = None,
    out_dir: str | Path | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[RetestResult, Path]:
    """Retest a run: its examples.parquet and labels.parquet when there, else BFCL v1 ingested and
    the later run's pool outputs labelled here (the same steps `switchcraft reproduce` takes)."""
    from data.config import load_data_config
    from data.labels import load_examples
    from data.pool import load_pool
    from data.schema import read_labels

    cfg, pool, run = load_data_config(data_config), load_pool(pool_path), Path(run_dir)
    earlier = earlier or cfg.output_path(EARLIER_KEY)
    if earlier is None:
        raise DataError("no earlier run given", path=data_config, field=f"outputs.{EARLIER_KEY}",
                        hint="add it to configs/data.yaml or pass --earlier")
    have_run = (run / "examples.parquet").exists() and (run / "labels.parquet").exists()
    examples = load_examples(run / "examples.parquet" if have_run else cfg.source_path("bfcl_v1"))
    if have_run:
        labels = read_labels(run / "labels.parquet")
    else:
        later = import_recorded(cfg.output_path("bfcl_v1"), layout="bfcl_v1", examples=examples,
                                models=[m.recording for m in pool.models], progress=False)
        labels = label_outputs(later, examples, pool)
    result = retest(examples, pool, labels, earlier, resamples=resamples, seed=seed)
    result.settings["labels_from"] = str(run / "labels.parquet") if have_run else cfg.output_path("bfcl_v1")
    return result, write_retest(result, out_dir or run / "retest")
