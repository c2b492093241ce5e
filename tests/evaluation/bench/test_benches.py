"""Each smaller bench on tiny inputs: it runs through its functions and its figures add up (the big ones:
test_gateway.py, test_soak.py, test_console.py, test_train.py, test_tools.py; bench serve:
tests/switchcraft/test_cli_bench.py; bench sessions and mcp-recall, which price and score rather than time:
tests/evaluation/offline/test_sessions.py, tests/serving/mcp/test_mcp_recall.py).

    .venv/bin/python -m pytest tests/evaluation/bench/test_benches.py -q
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from switchcraft.cli import app

pytestmark = pytest.mark.integration


def test_bench_pool_sends_every_call_to_a_replay_server_in_its_own_process(shared_data):
    from evaluation.bench.pool import bench_pool

    res = bench_pool([2], 24, shared_data)
    row = res["results"][2]
    assert res["model"] == "gpt-4o-2024-08-06-FC" and row["calls"] == 24
    assert row["calls_per_s"] >= row["calls_per_s_with_export"] > 0
    assert row["server_cpu_ms_per_call"] > 0  # read from the spawned server's own /proc entry


def test_bench_router_ab_times_both_routers_on_the_same_requests(exported, shared_data):
    from evaluation.bench.serve import ab_latency

    res = ab_latency(str(exported[0]), str(exported[0]) + "/", 8, shared_data)
    assert len(res) == 2 and all(r["n"] == 8 and 0 < r["p50_ms"] <= r["p99_ms"] for r in res.values())
    out = CliRunner().invoke(app, ["bench", "router-ab", str(exported[0]), str(exported[0]) + "/", "--n", "4",
                                   "--data-root", str(shared_data)])
    assert out.exit_code == 0 and out.output.count("over 4 requests") == 2, out.output


def test_bench_long_input_cuts_a_long_body_before_packing(exported):
    from evaluation.bench.long_input import measure

    rows = measure(exported[0], reps=3, whole_reps=1, sizes=(2_000, 200_000))
    assert [(r["encoder"], r["runs"]) for r in rows] == [("cut", 3), ("cut", 3), ("whole", 3), ("whole", 1)]
    cut, whole = rows[1], rows[3]
    assert cut["bytes"] == whole["bytes"] > 200_000 and cut["median_ms"] < whole["median_ms"]
    assert all(r["low_ms"] <= r["median_ms"] <= r["high_ms"] for r in rows)


def test_bench_verify_times_decoding_and_verifying_two_models_outputs(shared_data, tmp_path):
    from evaluation.bench.verify import bench_verify

    (tmp_path / "bfcl_v1").symlink_to(shared_data / "bfcl_v1")
    outputs = tmp_path / "bfcl_v1_pool_outputs_2024-08-11"
    outputs.mkdir()
    for model in ("claude-2.1", "Salesforce_xLAM-7b-fc-r"):
        (outputs / model).symlink_to(shared_data / outputs.name / model)
    res = bench_verify(tmp_path, repeat=2)
    assert 2 * 1000 < res["outputs"] <= 2 * 1630 and 0 < res["correct"] < res["outputs"]
    assert 0 < res["decode_verify_s"] <= res["cold_s"] and res["decode_verify_cpu_s"] <= res["cold_cpu_s"]
    assert res["outputs_per_s"] == pytest.approx(res["outputs"] / res["decode_verify_s"])
    out = CliRunner().invoke(app, ["bench", "verify", "--data-root", str(tmp_path)])
    assert out.exit_code == 0 and f"outputs:            {res['outputs']:,} ({res['correct']:,} correct)" in out.output
    assert "best of 1:" in out.output, out.output


@pytest.mark.slow
def test_bench_verify_decodes_and_verifies_every_recorded_output(shared_data):
    from evaluation.bench.verify import bench_verify

    res = bench_verify(shared_data)
    assert res["outputs"] == 115_730 and 0 < res["correct"] < res["outputs"]
    assert res["decode_verify_cpu_s"] > 0 and res["distinct_reasons"] > 5


@pytest.mark.slow
def test_bench_mcp_measures_direct_and_through_on_a_small_fleet(shared_data, tmp_path):
    from evaluation.bench.mcp import run

    from evaluation.bench.mcp import to_markdown

    rec = run(servers=2, tools=40, requests=5, data_root=str(shared_data), run_dir=str(tmp_path))
    assert rec["listed"]["tools/list direct"] == rec["listed"]["tools/list through"] == 20
    assert set(rec["added_ms"]) == {"tools/list", "tools/call"} and rec["ready_s"] > 0
    assert len(rec["ms"]) == 6 and all(0 < s["p50"] <= s["p99"] for s in rec["ms"].values())
    assert rec["added_ms"]["tools/call"]["p50"] == pytest.approx(
        rec["ms"]["tools/call through"]["p50"] - rec["ms"]["tools/call direct"]["p50"], abs=1e-3)
    table = to_markdown(rec).splitlines()
    assert table[2] == "| operation | P50 ms | P99 ms | added P50 | added P99 |" and len(table) == 4 + 6
    assert json.loads((tmp_path / "bench.json").read_text())["ms"] == rec["ms"]
