"""The whole reproduction on a slice of the real data, its numbers re-computed here
independently from labels.parquet and oof_predictions.parquet, and the notebook
re-rendering the report."""

import json
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient
from rich.console import Console

from data.pool import load_pool
from data.schema import read_labels
from evaluation.jobs.reproduce import ReproduceOptions, reproduce

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, shared_data):
    run = tmp_path_factory.mktemp("run")
    opts = ReproduceOptions(run_dir=run, data_config=REPO / "configs/data.yaml", pool=REPO / "configs/pool.yaml",
                            train_config=REPO / "configs/train.yaml", max_examples=90, folds=3,
                            import_all_models=False, progress=False,
                            train_overrides=[f"source_path={shared_data / 'bfcl_v1'}"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWITCHCRAFT_DATA_ROOT", str(shared_data))
        result = reproduce(opts, Console(quiet=True))
    return run, result


def test_report_numbers_match_an_independent_computation(tiny_run):
    run, result = tiny_run
    metrics = json.loads((run / "report" / "metrics.json").read_text())
    rows = {r["routing"]: r for r in metrics["headline"]}
    models = load_pool(REPO / "configs/pool.yaml").names
    oof = pd.read_parquet(run / "oof_predictions.parquet")
    held = sorted(set(oof.example_id))
    assert metrics["n_queries"] == len(held) == 90
    lab = {(lb.example_id, lb.model): lb for lb in read_labels(run / "labels.parquet")}
    correct = np.array([[lab[(e, m)].correct for m in models] for e in held])
    cost = np.array([[lab[(e, m)].cost_usd if lab[(e, m)].cost_usd is not None else np.nan for m in models] for e in held])
    cost = np.where(np.isnan(cost), np.nanmean(cost, axis=0), cost)
    fold = oof.drop_duplicates("example_id").set_index("example_id").loc[held, "fold"].to_numpy()
    prob = oof.pivot(index="example_id", columns="model", values="prob").loc[held, models].to_numpy()

    # oracle: cheapest correct model, else the cheapest
    oracle = [correct[i][np.argmin(np.where(correct[i], cost[i], np.inf))] if correct[i].any() else False for i in range(len(held))]
    assert rows["oracle"]["accuracy"] == pytest.approx(np.mean(oracle))
    # the router at τ = 0.5 with costs profiled on the other folds
    chosen = []
    for i in range(len(held)):
        train = fold != fold[i]
        profile = cost[train].mean(axis=0)
        confident = [j for j in range(len(models)) if prob[i, j] > 0.5]
        chosen.append(min(confident, key=lambda j: profile[j]) if confident else int(np.argmax(prob[i])))
    acc = np.mean([correct[i, j] for i, j in enumerate(chosen)])
    usd = np.mean([cost[i, j] for i, j in enumerate(chosen)]) * 1e6
    r = rows["switchcraft router (τ = 0.5)"]
    assert r["accuracy"] == pytest.approx(acc) and r["usd_per_million"] == pytest.approx(usd)
    # best single model: chosen on the other folds
    best = []
    for i in range(len(held)):
        train = fold != fold[i]
        acc_tr = correct[train].mean(axis=0)
        j = min(range(len(models)), key=lambda j: (-acc_tr[j], cost[train][:, j].mean()))
        best.append(correct[i, j])
    assert rows["best single model"]["accuracy"] == pytest.approx(np.mean(best))
    assert set(result.timings) >= {"ingest", "label", "evaluate"}
    assert (run / "report" / "cost_accuracy_tau.png").stat().st_size > 10_000


def test_notebook_rerenders_the_report(tiny_run):
    run, _ = tiny_run
    nb = nbformat.read(REPO / "notebooks" / "oracle_gap.ipynb", as_version=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWITCHCRAFT_RUN_DIR", str(run))
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for c in nb.cells
                      if c.cell_type == "code" for o in c.outputs)
    assert "90 held-out queries" in outputs and "oracle" in outputs
    assert (run / "report" / "notebook_curves.png").exists()


def test_evaluate_command_reports_a_run_again(tiny_run, tmp_path):
    """`switchcraft evaluate RUN` re-reads the run's files: the same numbers without the kNN rows, and λ rows."""
    from typer.testing import CliRunner

    from switchcraft.cli import app

    run, _ = tiny_run
    res = CliRunner().invoke(app, ["evaluate", str(run), "--pool", str(REPO / "configs/pool.yaml"), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    again = {r["routing"]: r for r in json.loads((tmp_path / "metrics.json").read_text())["headline"]}
    first = {r["routing"]: r for r in json.loads((run / "report" / "metrics.json").read_text())["headline"]}
    shared = [k for k in first if not k.startswith("kNN")]
    assert shared and all(again[k]["accuracy"] == pytest.approx(first[k]["accuracy"]) for k in shared)
    assert any(k.startswith("switchcraft router, λ rule") for k in again)
    deploy = json.loads((tmp_path / "metrics.json").read_text())["context"]["deploy"]
    from evaluation.offline.routing_eval import LAMBDA_GRID, TAU_GRID

    assert set(deploy) == {"match_best", "cost_fraction", "strategy_policy"}
    assert all(deploy[t]["lambda"] in LAMBDA_GRID and deploy[t]["tau"] in TAU_GRID for t in ("match_best", "cost_fraction"))
    # The strategy rows came back too, and the deployable strategy policy is in the router's router.json.
    assert any(k.startswith("switchcraft strategies") for k in again)
    from training.policy import StrategyPolicy

    info = json.loads((run / "router" / "router.json").read_text())
    assert StrategyPolicy.from_json(info["strategy_policy"]).models == info["models"]
    assert "router.rule=lambda router.lam=" in res.output

    res = CliRunner().invoke(app, ["evaluate", str(tmp_path / "nothing")])
    assert res.exit_code == 1 and "no held-out predictions" in res.output


def test_strategy_rows_recomputed_from_the_recorded_outputs(tiny_run):
    """Every strategy row's accuracy and cost, re-run by hand from strategy_choices.csv, the recorded outputs
    (calls_agree on their decoded calls) and the labels."""
    from data.schema import read_examples, read_outputs
    from data.verify import language_of
    from data.verify.agree import calls_agree, disagreement_kind, effective_calls
    from data.verify.batch import is_text

    run, _ = tiny_run
    metrics = json.loads((run / "report" / "metrics.json").read_text())
    rows = {r["routing"]: r for r in metrics["headline"]}
    pool = load_pool(REPO / "configs/pool.yaml")
    choices = pd.read_csv(run / "report" / "strategy_choices.csv")
    names = [c for c in choices.columns if c not in ("example_id", "fold")]
    assert any(n.startswith("switchcraft strategies") for n in names) and len(choices) == metrics["n_queries"]
    ex = {e.id: e for e in read_examples(run / "examples.parquet")}
    lab = {(lb.example_id, lb.model): lb for lb in read_labels(run / "labels.parquet")}
    by_rec = {m.recording: m for m in pool.models}
    calls = {}
    for o in read_outputs(run / "outputs.parquet"):
        if o.model in by_rec:
            pm = by_rec[o.model]
            calls[(o.example_id, pm.name)] = effective_calls(
                o.calls, o.decode_error, native_text=pm.prompt_style == "native" and is_text(o.raw))
    mean_cost = {m: np.nanmean([lab[(e, m)].cost_usd if lab[(e, m)].cost_usd is not None else np.nan
                                for e in choices.example_id]) for m in pool.names}
    cost_of = {(e, m): lab[(e, m)].cost_usd if lab[(e, m)].cost_usd is not None else mean_cost[m]
               for e in choices.example_id for m in pool.names}

    def parse(s):
        if s.startswith("single("):
            return [s[7:-1]], None, None, {}
        inner, esc = s[6:-1].split(" → ")
        esc, _, rules = esc.partition("; ")
        parts = inner.split(", ")
        rule = dict(r.split(": ") for r in rules.split(", ")) if rules else {}
        return parts[:2], (parts[2] if len(parts) == 3 else None), esc, rule

    for name in names:
        ok, paid = [], []
        for r in choices.itertuples(index=False):
            e, strat = r.example_id, r[list(choices.columns).index(name)]
            first, tb, esc, rule = parse(strat)
            if len(first) == 1:
                ok.append(lab[(e, first[0])].correct)
                paid.append(cost_of[(e, first[0])])
                continue
            a, b = first
            tools, lang = ex[e].tools, language_of(ex[e])
            # "cheaper" by the training folds' profiled costs, as the gateway orders by expected cost
            train = choices.example_id[choices.fold != r.fold]
            prof = {m: np.mean([cost_of[(x, m)] for x in train]) for m in pool.names}
            spent = cost_of[(e, a)] + cost_of[(e, b)]
            if calls_agree(tools, calls[(e, a)], calls[(e, b)], language=lang):
                ok.append(lab[(e, min((a, b), key=prof.get))].correct)
                paid.append(spent)
                continue
            action = rule.get(disagreement_kind(tools, calls[(e, a)], calls[(e, b)], language=lang))
            if action in ("first", "second"):  # a resolve rule answers at once
                ok.append(lab[(e, a if action == "first" else b)].correct)
                paid.append(spent)
                continue
            if tb is not None and action != "escalate":
                spent += cost_of[(e, tb)]
                side = next((x for x in (a, b) if calls_agree(tools, calls[(e, tb)], calls[(e, x)], language=lang)), None)
                if side is not None:
                    ok.append(lab[(e, min((side, tb), key=prof.get))].correct)
                    paid.append(spent)
                    continue
            if esc not in (a, b, None if action == "escalate" else tb):
                spent += cost_of[(e, esc)]
            ok.append(lab[(e, esc)].correct)
            paid.append(spent)
        assert rows[name]["accuracy"] == pytest.approx(np.mean(ok)), name
        assert rows[name]["usd_per_million"] == pytest.approx(np.mean(paid) * 1e6), name
        assert rows[name]["accuracy_ci_low"] <= rows[name]["accuracy"] <= rows[name]["accuracy_ci_high"]


def test_the_ceiling_bounds_every_single_model_within_its_budget(tiny_run):
    """The in-sample ceiling per cost target is at least as accurate as any single model that fits the budget on
    all rows (it chooses among them too), its mix spends no more than the budget, and the report says whether
    routing without per-request information reaches the best single model."""
    run, _ = tiny_run
    metrics = json.loads((run / "report" / "metrics.json").read_text())
    labels = pd.DataFrame([lb.model_dump() for lb in read_labels(run / "labels.parquet")])
    labels = labels[labels.example_id.isin(pd.read_csv(run / "report" / "strategy_choices.csv").example_id)]
    per_model = labels.groupby("model").agg(acc=("correct", "mean"), cost=("cost_usd", "mean"))
    best = per_model.sort_values(["acc", "cost"], ascending=[False, True]).iloc[0]
    ceilings = metrics["fixed_strategy_ceiling"]
    assert [c["cost_fraction"] for c in ceilings] == [0.2, 0.1]
    for c in ceilings:
        assert c["best_single_accuracy"] == pytest.approx(best.acc)
        assert c["usd_per_million"] <= c["cost_fraction"] * best.cost * 1e6 + 1e-6
        fits = per_model[per_model.cost <= c["cost_fraction"] * best.cost]
        assert c["accuracy"] >= fits.acc.max() - 1e-12 and c["mix_accuracy"] >= c["accuracy"]
        assert c["mix_usd_per_million"] <= c["cost_fraction"] * best.cost * 1e6 + 1e-6
        assert c["reaches_best_single"] == (c["mix_accuracy"] >= c["best_single_accuracy"])
    report = (run / "report" / "report.md").read_text()
    assert "## Can this pool meet the cost targets? (in-sample ceiling)" in report
