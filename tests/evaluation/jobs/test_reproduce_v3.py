"""`reproduce` with the 2025 pool on a slice of BFCL v3 (the benchmark named by the pool file's `benchmark:`):
end to end to the report, every held-out query in one fold with the rest of its live conversation, the
test–retest section replaced by a note; and a pool file naming an unknown benchmark refused before any work."""

import json
import re
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from data.errors import DataError
from evaluation.jobs.reproduce import ReproduceOptions, reproduce

REPO = Path(__file__).resolve().parents[3]
POOL = REPO / "configs/pools/bfcl_v3_2025.yaml"
NEXUS = REPO / "configs/pools/nexusbench_2025.yaml"


def _opts(run: Path, pool: Path, **kw) -> ReproduceOptions:
    return ReproduceOptions(run_dir=run, data_config=REPO / "configs/data.yaml", pool=pool,
                            train_config=REPO / "configs/train.yaml", import_all_models=False, progress=False, **kw)


@pytest.fixture(scope="module")
def v3_run(tmp_path_factory, shared_data):
    run = tmp_path_factory.mktemp("v3")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWITCHCRAFT_DATA_ROOT", str(shared_data))
        result = reproduce(_opts(run, POOL, max_examples=150, folds=3, knn=False, with_pools=[NEXUS]),
                           Console(quiet=True))
    return run, result


@pytest.mark.slow
def test_v3_slice_runs_end_to_end_and_writes_the_report(v3_run):
    run, result = v3_run
    metrics = json.loads((run / "report" / "metrics.json").read_text())
    assert metrics["n_queries"] == 150 and len(metrics["models"]) == 15
    assert metrics["context"]["benchmark"] == "bfcl_v3"
    rows = {r["routing"]: r for r in metrics["headline"]}
    assert {"best single model", "oracle"} <= set(rows)
    for name in ("best single model", "oracle", "cheapest model"):
        r = rows[name]
        assert r["accuracy_ci_low"] <= r["accuracy"] <= r["accuracy_ci_high"], name
    text = result.report.read_text()
    assert "Benchmark bfcl_v3, pool" in text
    assert "## How much of the oracle is luck: test–retest" in text and "bfcl_v3 has one" in text
    assert set(result.timings) >= {"ingest", "import recorded outputs", "label", "evaluate"}
    assert "strategy_policy" in json.loads((run / "router" / "router.json").read_text())


@pytest.mark.slow
def test_the_second_benchmark_runs_into_its_own_folder_and_joins_the_report(v3_run):
    run, result = v3_run
    second = json.loads((run / "report" / "metrics.json").read_text())["second_benchmarks"]["nexusbench"]
    assert second["pool"] == str(NEXUS) and second["report"] == "nexusbench/report/report.md"
    own = json.loads((run / "nexusbench" / "report" / "metrics.json").read_text())
    assert own["context"]["benchmark"] == "nexusbench" and own["n_queries"] == 150
    assert [r["routing"] for r in second["headline"]] == [r["routing"] for r in own["headline"]]
    text = result.report.read_text()
    assert "## Second benchmark: nexusbench" in text and "NexusBench harness's verdict" in text
    assert "--with-pool" in json.loads((run / "report" / "metrics.json").read_text())["context"]["command"]
    # Each final router scored on the other benchmark's queries, over the 8 models the pools share.
    assert "## Transfer between the benchmarks" in text and f"### {run.name} → nexusbench" in text
    for name in (f"{run.name}_to_nexusbench", f"nexusbench_to_{run.name}"):
        rows = pd.read_csv(run / "transfer" / name / "transfer.csv")
        assert len(json.loads((run / "transfer" / name / "transfer.json").read_text())["shared_models"]) == 8
        assert {"oracle"} <= set(rows.routing) and second["transfer"][name]


@pytest.mark.slow
def test_v3_live_conversations_stay_in_one_fold(v3_run):
    run, _ = v3_run
    oof = pd.read_parquet(run / "oof_predictions.parquet").drop_duplicates("example_id")
    folds = defaultdict(set)
    for eid, fold in zip(oof.example_id, oof.fold):
        m = re.match(r"bfcl_v3:(live_[a-z_]+?)_\d+-(\d+)-\d+$", eid)
        if m:
            folds[m.groups()].add(fold)
    assert sum(len(v) > 0 for v in folds.values()) > 10  # the slice holds live conversations
    assert all(len(v) == 1 for v in folds.values()), {k: v for k, v in folds.items() if len(v) > 1}


def test_a_pool_naming_an_unknown_benchmark_is_refused(tmp_path):
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL.read_text().replace("benchmark: bfcl_v3", "benchmark: bfcl_v9"))
    with pytest.raises(DataError) as e:
        reproduce(_opts(tmp_path / "run", pool), Console(quiet=True))
    assert e.value.path == str(pool) and e.value.field == "benchmark" and e.value.line is not None
    assert "bfcl_v1" in str(e.value) and "bfcl_v3" in str(e.value)
    assert not (tmp_path / "run" / "examples.parquet").exists()


@pytest.mark.slow
def test_a_pool_drawn_from_the_2025_models_runs_end_to_end(tmp_path, shared_data):
    import yaml

    from data.pool.sample import sample_from_pool

    pool = tmp_path / "drawn.yaml"
    pool.write_text(yaml.safe_dump(sample_from_pool(POOL, n=5, seed=4), sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWITCHCRAFT_DATA_ROOT", str(shared_data))
        result = reproduce(_opts(tmp_path / "run", pool, max_examples=100, folds=3, knn=False), Console(quiet=True))
    metrics = json.loads((tmp_path / "run" / "report" / "metrics.json").read_text())
    assert len(metrics["models"]) == 5 and metrics["context"]["benchmark"] == "bfcl_v3"
    assert any(r["routing"].startswith("switchcraft strategies") for r in metrics["headline"])
    assert result.report.exists()
