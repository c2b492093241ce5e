"""`switchcraft bench serve` on the tiny router: every row present, numbers sane, the table written.

    .venv/bin/python -m pytest tests/switchcraft/test_cli_bench.py -q

Tiny request count and no Triton (the integration tests start it): this checks
the benchmark's plumbing and table, not the machine's speed.
"""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from switchcraft.cli_bench import register_bench


def test_bench_serve_times_every_engine_and_lever(exported, tiny_router_dir, tmp_path, shared_data):  # noqa: F811
    bench = typer.Typer()
    register_bench(bench)
    out = tmp_path / "bench.md"
    args = ["serve", "--onnx", str(exported[0]), "--router", str(tiny_router_dir), "--out", str(out), "-n", "6",
            "--throughput-requests", "8", "--no-triton", "--threads", "1", "--data-root", str(shared_data),
            "--note", "test run"]
    res = CliRunner().invoke(bench, args)
    assert res.exit_code == 0, res.output
    result = json.loads(out.with_suffix(".json").read_text())
    engines = [r["engine"] for r in result["rows"]]
    assert engines[:3] == ["PyTorch eager", "ORT fp32 (in-process)", "ORT INT8 (in-process)"]
    assert {"lever: ORT fp32 padded to 512", "lever: ORT fp32, 1 thread",
            "lever: ORT fp32, no graph optimisation (raw export, ORT_DISABLE_ALL)",
            "lever: ORT fp32, 1 of 2 encoder layers (fused)", "lever: ORT INT8, 1 of 2 encoder layers"} <= set(engines)
    for row in result["rows"]:
        assert row["n"] == 6 and 0 < row["p50_ms"] <= row["p99_ms"]
    fp32 = result["rows"][1]
    assert fp32["rps_c8"] > 0 and fp32["rps_c32"] > 0
    assert fp32["batched_rps_c8"] > 0 and fp32["batched_rps_c32"] > 0 and "batched_rps_c8" not in result["rows"][0]
    assert result["packed_tokens"]["max"] <= 256 and result["encode"]["p50_ms"] > 0
    table = out.read_text()
    assert table.startswith("| engine | P50 ms | P99 ms |") and "Targets: in-process P99" in table
    assert "| req/s @8 batched | req/s @32 batched |" in table
    assert "Note: test run" in table and "INT8 vs fp32" in table
