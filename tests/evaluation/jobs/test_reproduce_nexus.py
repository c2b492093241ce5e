"""`reproduce` with the NexusBench pool on a slice of its episodes: end to end to the report, every label the
harness's verdict (never our verifier's), only the pool's recordings imported, and the report saying so.

    .venv/bin/python -m pytest -q -m slow tests/evaluation/jobs/test_reproduce_nexus.py
"""

import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from data.schema import read_labels, read_outputs
from evaluation.jobs.reproduce import ReproduceOptions, reproduce

REPO = Path(__file__).resolve().parents[3]
POOL = REPO / "configs/pools/nexusbench_2025.yaml"


@pytest.mark.slow
def test_nexus_slice_is_labelled_by_the_harness_end_to_end(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("SWITCHCRAFT_DATA_ROOT", str(shared_data))
    run = tmp_path / "nexus"
    result = reproduce(ReproduceOptions(run_dir=run, data_config=REPO / "configs/data.yaml", pool=POOL,
                                        train_config=REPO / "configs/train.yaml", max_examples=120, folds=3,
                                        knn=False, progress=False), Console(quiet=True))
    reasons = Counter(lab.reason for lab in read_labels(run / "labels.parquet"))
    assert set(reasons) <= {"ok", "episode_failed", "no_answer"} and reasons["episode_failed"] > 0
    assert len({o.model for o in read_outputs(run / "outputs.parquet")}) == 8  # the partial Qwen3 runs left out
    metrics = json.loads((run / "report" / "metrics.json").read_text())
    assert metrics["context"]["benchmark"] == "nexusbench" and "harness" in metrics["context"]["labels"]
    text = result.report.read_text()
    assert "Benchmark nexusbench, pool" in text and "## Labels" in text and "not switchcraft's verifier" in text
