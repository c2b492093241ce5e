"""The BFCL v3 adapter on the real question and answer files of the 2025 pool run.

    .venv/bin/python -m pytest -q tests/data/sources/test_bfcl_v3.py

Reads ../shared/data/bfcl_v3_pool_outputs_2025-08/data (the `shared_data` fixture fails when the shared
data is absent, as for every real-data test).
"""

from __future__ import annotations

import pytest

from data.sources import IngestReport, read_source

COUNTS = {
    "simple": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "irrelevance": 240, "java": 100,
    "javascript": 50, "live_simple": 258, "live_multiple": 1053, "live_parallel": 16, "live_parallel_multiple": 24,
    "live_irrelevance": 882, "live_relevance": 18,
}


@pytest.fixture(scope="module")
def v3(shared_data):
    report = IngestReport()
    examples = read_source("bfcl_v3", str(shared_data / "bfcl_v3_pool_outputs_2025-08" / "data"), report)
    return {e.id: e for e in examples}, report


def test_thirteen_categories_3641_queries(v3):
    by_id, report = v3
    assert len(by_id) == sum(COUNTS.values()) == 3641
    assert {c: n for (_, c), n in report.counts.items()} == COUNTS
    assert not report.skipped
    assert all(i.startswith("bfcl_v3:") and e.source == "bfcl_v3" for i, e in by_id.items())


def test_the_run_folder_above_data_reads_the_same(shared_data, v3):
    by_id, _ = v3
    again = read_source("bfcl_v3", str(shared_data / "bfcl_v3_pool_outputs_2025-08"))
    assert [e.id for e in again] == list(by_id)


def test_expected_answers_by_kind(v3):
    by_id, _ = v3
    assert all(by_id[i].expected.no_call for i in by_id if by_id[i].category in ("irrelevance", "live_irrelevance"))
    assert all(by_id[i].expected.any_call for i in by_id if by_id[i].category == "live_relevance")
    others = [e for e in by_id.values() if e.category not in ("irrelevance", "live_irrelevance", "live_relevance")]
    assert others and all(e.expected.alternatives for e in others)
    (call,) = by_id["bfcl_v3:simple_0"].expected.alternatives[0]
    assert call.name == "calculate_triangle_area" and call.args["base"].values == [10]
    live = by_id["bfcl_v3:live_simple_0-0-0"]
    assert live.question.startswith("Can you retrieve the details") and live.tools


def test_non_live_answers_are_v3_revisions_not_v1_labels(v3, shared_data):
    by_id, _ = v3
    v1 = {e.id: e for e in read_source("bfcl_v1", str(shared_data / "bfcl_v1"), categories=["multiple_function"])}
    # The same question; v3 accepts more locations than v1 did.
    v1_loc = v1["bfcl_v1:multiple_function_153"].expected.alternatives[0][0].args["location"].values
    v3_loc = by_id["bfcl_v3:multiple_153"].expected.alternatives[0][0].args["location"].values
    assert by_id["bfcl_v3:multiple_153"].question == v1["bfcl_v1:multiple_function_153"].question
    assert v1_loc == ["global"] and v3_loc == ["global", "Lisbon", "Lisbon, Portugal"]


def test_a_folder_without_v3_files_is_refused(tmp_path):
    from data.errors import DataError

    (tmp_path / "BFCL_v4_simple_python.json").write_text("")
    with pytest.raises(DataError, match="BFCL_v3"):
        read_source("bfcl_v3", str(tmp_path))
