"""`switchcraft bench gateway`: the whole stack on loopback (replay upstreams, `switchcraft serve` in its own process).

    .venv/bin/python -m pytest -q tests/evaluation/bench/test_gateway.py

A short bounded run with every endpoint killed for a second: requests before
the outage are answered, those during it get a 503 (never a hang), and the
table is written. The figures themselves are the README's, not a test's.
"""

from __future__ import annotations

import json

import pytest

from evaluation.bench.gateway import GatewayBenchConfig, run_gateway_bench, to_markdown, write_results
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
def test_two_processes_share_one_real_redis(exported, shared_data, tmp_path):  # noqa: F811
    cfg = GatewayBenchConfig(router_dir=exported[0], data_root=shared_data, pool=REPO / "configs" / "pool.yaml",
                             requests=12, concurrency=4, max_seconds=120, processes=2, state="redis")
    result = run_gateway_bench(cfg)
    s = result.summary()
    assert s["ok"] == 12 and s["processes"] == 2 and s["state"] == "redis"
    assert result.metrics["switchcraft_key_requests_total"] == 12  # summed over both processes' /metrics
    assert result.metrics["switchcraft_reserved_usd_total"] > 0  # every request reserved in the shared store
    assert s["store_ms"]["n"] == 300 and 0 < s["store_ms"]["p50"] <= s["store_ms"]["p99"]
    assert "2 gateway process(es), state: redis" in to_markdown(result)


@pytest.mark.parametrize("kw, fragment", [({"requests": 0}, "at least 1"), ({"kill": ["all"], "kill_at": 50}, "--kill-at"),
                                          ({"max_seconds": 10_000}, "bounded"), ({"processes": 2}, "shared store"),
                                          ({"state": "postgres"}, "memory, sqlite or redis")])
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
