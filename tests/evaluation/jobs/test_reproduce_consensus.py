"""`reproduce --labels consensus` on a slice of the real data: consensus labels, a router trained on them, and
the "Without ground truth" section, its numbers re-checked here from the run's files."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from data.pool import load_pool
from data.schema import read_labels
from evaluation.jobs.reproduce import ReproduceOptions, reproduce

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def consensus_run(tmp_path_factory, shared_data):
    run = tmp_path_factory.mktemp("run")
    opts = ReproduceOptions(run_dir=run, data_config=REPO / "configs/data.yaml", pool=REPO / "configs/pool.yaml",
                            train_config=REPO / "configs/train.yaml", max_examples=90, folds=3, knn=False,
                            import_all_models=False, progress=False, labels="consensus",
                            train_overrides=[f"source_path={shared_data / 'bfcl_v1'}"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWITCHCRAFT_DATA_ROOT", str(shared_data))
        reproduce(opts, Console(quiet=True))
    return run


def test_consensus_section_matches_the_runs_files(consensus_run):
    run = consensus_run
    metrics = json.loads((run / "report" / "metrics.json").read_text())
    models = load_pool(REPO / "configs/pool.yaml").names
    truth = {(lb.example_id, lb.model): lb.correct for lb in read_labels(run / "labels.parquet")}
    cons = {(lb.example_id, lb.model): lb.correct for lb in read_labels(run / "labels_consensus.parquet")}
    assert set(cons) == set(truth)
    same = np.mean([cons[k] == truth[k] for k in truth])
    assert metrics["consensus_label_agreement"]["agreement"] == pytest.approx(same)
    assert metrics["headline"]  # the truth-fit headline is kept
    # The consensus router was trained on consensus labels, over the same held-out folds.
    oof = pd.read_parquet(run / "consensus" / "oof_predictions.parquet")
    base = pd.read_parquet(run / "oof_predictions.parquet")
    folds = base.drop_duplicates("example_id").set_index("example_id")["fold"]
    assert (oof.drop_duplicates("example_id").set_index("example_id")["fold"].loc[folds.index] == folds).all()
    assert set(oof["model"]) == set(models)
    rows = {r["routing"]: r for r in metrics["without_ground_truth"]["rows"]}
    assert "switchcraft strategies, λ for ≤ 20% of best-single cost" in rows
    head = {r["routing"]: r for r in metrics["headline"]}
    for name, r in rows.items():
        assert r["delta_accuracy"] == pytest.approx(r["consensus_fit_accuracy"] - r["truth_fit_accuracy"])
        lo, hi = r["delta_accuracy_ci"]
        assert lo <= r["delta_accuracy"] + 1e-9 and r["delta_accuracy"] - 1e-9 <= hi
        if name in head:  # the truth-fit side is the headline's row
            assert r["truth_fit_accuracy"] == pytest.approx(head[name]["accuracy"])
    report = (run / "report" / "report.md").read_text()
    assert "## Without ground truth" in report
    pairs = metrics["without_ground_truth"]["error_sharing_pairs"]
    assert all(a in models and b in models and a != b for a, b in pairs)
    assert "left off the consensus-fit menu" in report
