"""Consensus labels with the agreement checks in worker processes: the same tensor and the same labels as one
process, on logged traffic (a synthetic decision log written by the gateway's writer).

    .venv/bin/python -m pytest -q tests/data/test_consensus_workers.py
"""

from __future__ import annotations

import numpy as np
import pytest

from data.consensus import agreement_tensor, answers_of_outputs, consensus_of_outputs
from data.logged import complete_rows, explored_contracts, read_explored
from data.pool import load_pool
from evaluation.bench.learn import write_learn_log
from tests.routers import REPO

POOL = load_pool(REPO / "configs" / "pool.yaml")


@pytest.mark.slow
def test_labels_on_two_workers_equal_the_sequential_ones(tmp_path):
    write_learn_log(tmp_path / "log", POOL, 600, explore=0.3, seed=5, now=2.1e9)
    examples, outputs = explored_contracts(read_explored(tmp_path / "log", POOL.names), POOL)
    by_id = {e.id: e for e in complete_rows(examples, outputs, POOL)}
    assert len(by_id) > 100
    rows = answers_of_outputs(outputs, POOL)
    tools = {e: x.tools for e, x in by_id.items()}
    one = agreement_tensor(rows, tools, models=POOL.names)
    two = agreement_tensor(rows, tools, models=POOL.names, workers=2)
    assert one[0] == two[0] and all(np.array_equal(a, b) for a, b in zip(one[2:], two[2:]))
    assert 0.2 < one[2].mean() < 0.9  # answers agree and disagree: the check had work to do
    sequential = consensus_of_outputs(outputs, by_id, POOL).frame
    parallel = consensus_of_outputs(outputs, by_id, POOL, workers=2).frame
    assert parallel.equals(sequential) and len(sequential) == 8 * len(by_id)
    assert 0 < sequential["correct"].mean() < 1
