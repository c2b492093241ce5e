"""`switchcraft bench gateway`: the whole stack on loopback (replay upstreams, `switchcraft serve` in its own process).

    .venv/bin/python -m pytest -q tests/evaluation/bench/test_gateway.py

A short bounded run with every endpoint killed for a second: requests before
the outage are answered, those during it get a 503 (never a hang), and the
table is written. `--fleet` on one small matrix (a gateway of two workers and
two replicas, each with either log) on a dozen requests a row: every row
answered and logged, each compared with the direct cell of its own stack. The
figures themselves are docs/performance.md's, not a test's.
"""

from __future__ import annotations

import json

import pytest

from typer.testing import CliRunner

from evaluation.bench import _fleet as fleet
from evaluation.bench.gateway import GatewayBenchConfig, run_gateway_bench, to_markdown, write_results
from switchcraft.cli import app
from tests.routers import REPO

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_a_short_run_with_every_endpoint_killed_answers_then_fails_fast(exported, shared_data, tmp_path):  # noqa: F811
    cfg = GatewayBenchConfig(router_dir=exported[0], data_root=shared_data, pool=REPO / "configs" / "pool.yaml",
                             requests=30, concurrency=2, kill=["all"], kill_at=6, kill_for_s=1.0, max_seconds=120)
    result = run_gateway_bench(cfg)
    s = result.summary()
    statuses = [o.status for o in result.outcomes]
    assert s["requests"] == 30 and set(statuses) <= {200, 502, 503}, statuses
    assert statuses[:4] == [200] * 4 and 503 in statuses  # answered before the outage, fast 503s during it
    assert s["lost"] == statuses.count(502) + statuses.count(503) and s["max_503_ms"] is not None
    assert 0 < s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"] and s["p50_503_ms"] <= s["p99_503_ms"] <= s["max_503_ms"]
    assert len(result.killed) == 4 and result.metrics["switchcraft_circuit_opens_total"] >= 1
    write_results(result, tmp_path / "bench.md")
    assert (tmp_path / "bench.md").read_text().startswith("`switchcraft bench gateway` — 30 requests at concurrency 2")
    assert json.loads((tmp_path / "bench.json").read_text())["summary"]["requests"] == 30
    assert "| ok | failed (by status) | lost |" in to_markdown(result)


@pytest.mark.slow
def test_two_processes_share_one_real_redis_and_each_logs(exported, shared_data, tmp_path):  # noqa: F811
    cfg = GatewayBenchConfig(router_dir=exported[0], data_root=shared_data, pool=REPO / "configs" / "pool.yaml",
                             requests=12, concurrency=4, max_seconds=120, processes=2, state="redis", log="sqlite")
    result = run_gateway_bench(cfg)
    s = result.summary()
    assert s["ok"] == 12 and s["processes"] == 2 and s["state"] == "redis"
    assert result.metrics["switchcraft_key_requests_total"] == 12  # summed over both processes' /metrics
    assert result.metrics["switchcraft_reserved_usd_total"] > 0  # every request reserved in the shared store
    assert result.metrics["switchcraft_decision_log_records_total"] == 12  # each process into its own folder
    assert s["store_ms"]["n"] == 300 and 0 < s["store_ms"]["p50"] <= s["store_ms"]["p99"]
    assert "2 gateway process(es), state: redis, log: sqlite" in to_markdown(result)


@pytest.mark.parametrize("kw, fragment", [({"requests": 0}, "at least 1"), ({"kill": ["all"], "kill_at": 50}, "--kill-at"),
                                          ({"max_seconds": 10_000}, "bounded"), ({"processes": 2}, "shared store"),
                                          ({"state": "postgres"}, "memory, sqlite or redis"),
                                          ({"log": "mysql"}, "none, sqlite or postgres")])
def test_the_run_is_bounded_and_checked(kw, fragment, tmp_path):
    with pytest.raises(ValueError, match=fragment):
        GatewayBenchConfig(router_dir=tmp_path, data_root=tmp_path, **{"requests": 10, **kw})


@pytest.mark.slow
def test_overhead_measures_direct_named_and_routed_on_the_same_requests(exported, shared_data, tmp_path):  # noqa: F811
    from evaluation.bench.overhead import OverheadConfig, run_overhead, to_markdown, write_results

    cfg = OverheadConfig(router_dir=exported[0], data_root=shared_data, pool=REPO / "configs" / "pool.yaml",
                         concurrency=[1, 4], states=["memory", "sqlite"], requests=12, warmup=2)
    result = run_overhead(cfg)
    cells = result["cells"]
    # direct once per concurrency, each gateway mode once per (concurrency, store); every request answered
    assert sorted((c["mode"], c["state"], c["concurrency"]) for c in cells) == sorted(
        [("direct", None, 1), ("direct", None, 4)]
        + [(m, s, c) for m in ("named", "routed") for s in ("memory", "sqlite") for c in (1, 4)])
    assert all(c["failed"] == 0 and c["ok"] == (12 if c["concurrency"] > 1 else 10) for c in cells)
    row = next(r for r in result["rows"] if r["mode"] == "routed" and r["concurrency"] == 4 and r["state"] == "sqlite")
    assert row["added_p50_ms"] == pytest.approx(row["p50_ms"] - row["direct_p50_ms"])
    assert row["throughput_share"] == pytest.approx(row["rps"] / row["direct_rps"])
    table = to_markdown(result)
    assert table.count("\n| 4 | ") == 4 and "goal ≤ 5 ms" in table and "goal ≥ 80%" in table
    write_results(result, tmp_path / "overhead.md")
    assert json.loads((tmp_path / "overhead.json").read_text())["model"] == result["model"]


def test_the_overhead_run_is_bounded_and_checked(tmp_path):
    from evaluation.bench.overhead import OverheadConfig

    for kw, fragment in [({"concurrency": [0]}, "within"), ({"states": ["postgres"]}, "memory, sqlite or redis"),
                         ({"requests": 10**6}, "bounded")]:
        with pytest.raises(ValueError, match=fragment):
            OverheadConfig(router_dir=tmp_path, data_root=tmp_path, **kw)


@pytest.mark.slow
def test_each_shape_and_log_is_measured_named_and_routed_against_its_own_direct_cell(exported, shared_data,
                                                                                     postgres, tmp_path):
    cfg = fleet.FleetConfig(router_dir=exported[0], data_root=shared_data, pool=REPO / "configs" / "pool.yaml",
                            shapes=fleet.parse_shapes("1x2,2x1"), logs=["sqlite", "postgres"], requests=12,
                            concurrency=4, warmup=4)
    seen = []
    result = fleet.run_fleet(cfg, progress=lambda what, done, total: seen.append((done, total)), postgres=postgres)
    rows, cells = result["rows"], result["cells"]
    assert [(r["shape"], r["log"], r["mode"]) for r in rows] == [
        (shape, log, mode) for shape in ("2 workers", "2 replicas")
        for log in ("sqlite", "postgres") for mode in ("named", "routed")]
    assert [c["mode"] for c in cells] == ["direct", "named", "routed"] * 4  # one stack a shape × log
    for k, row in enumerate(rows):
        direct = cells[3 * (k // 2)]
        assert row["ok"] == 12 and row["failed"] == 0 and row["rps"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]
        assert (row["direct_p50_ms"], row["direct_p99_ms"], row["direct_rps"]) == (direct["p50_ms"], direct["p99_ms"],
                                                                                   direct["rps"])
        assert row["added_p50_ms"] == pytest.approx(row["p50_ms"] - direct["p50_ms"])
        assert row["added_p99_ms"] == pytest.approx(row["p99_ms"] - direct["p99_ms"])
        assert row["throughput_share"] == pytest.approx(row["rps"] / direct["rps"])
        assert row["logged"] == row["sent"] == 16  # every request, warm-up included, reached its log
    assert all(c["ok"] == 12 and c["rps"] > 0 for c in cells if c["mode"] == "direct")
    assert seen[-1] == (12, 12) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    table = fleet.to_markdown(result)
    assert table.count("\n| 2 replicas | PostgreSQL | ") == 2 and "| added P50 / P99 ms |" in table
    fleet.write_results(result, tmp_path / "fleet.md")
    assert json.loads((tmp_path / "fleet.json").read_text())["rows"][0]["added_p50_ms"] == rows[0]["added_p50_ms"]


@pytest.mark.slow
def test_the_command_prints_the_table_and_writes_it(exported, shared_data, tmp_path):
    out = tmp_path / "fleet" / "fleet.md"
    res = CliRunner().invoke(app, ["bench", "gateway", "--fleet", "--router", str(exported[0]), "--data-root",
                                   str(shared_data), "--pool", str(REPO / "configs" / "pool.yaml"), "--shapes", "1x1",
                                   "--log", "sqlite", "-n", "10", "-c", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "│" not in res.output and f"wrote {out}" in res.output
    assert res.output.count(" 1 worker   SQLite   ") == 2, res.output  # the terminal's table, whole
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [(r["mode"], r["ok"], r["logged"]) for r in rows] == [("named", 10, 42), ("routed", 10, 42)]
    assert out.read_text().count("\n| 1 worker | SQLite | ") == 2


def test_shapes_and_logs_are_checked(tmp_path):
    assert fleet.parse_shapes("1x1, 1x4,2x1,1x1") == [fleet.Shape(1, 1), fleet.Shape(1, 4), fleet.Shape(2, 1)]
    for text in ("2", "1x0", "9x1", "", "1x2,x"):
        with pytest.raises(ValueError, match="--shapes"):
            fleet.parse_shapes(text)
    for kw, fragment in [({"logs": ["none"]}, "sqlite and postgres"), ({"requests": 5}, "bounded"),
                         ({"concurrency": 0}, "--concurrency")]:
        with pytest.raises(ValueError, match=fragment):
            fleet.FleetConfig(router_dir=tmp_path, data_root=tmp_path, **kw)
    res = CliRunner().invoke(app, ["bench", "gateway", "--fleet", "--kill", "all", "--router", str(tmp_path)])
    assert res.exit_code == 1 and "--fleet sets the processes, workers and state" in res.output, res.output
    res = CliRunner().invoke(app, ["bench", "gateway", "--fleet", "--shapes", "3", "--router", str(tmp_path)])
    assert res.exit_code == 1 and "is not RxW" in res.output
