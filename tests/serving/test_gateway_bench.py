"""`switchcraft bench gateway`: the whole stack on loopback (replay upstreams, `switchcraft serve` in its own process).

    .venv/bin/python -m pytest -q tests/serving/test_gateway_bench.py

A short bounded run with every endpoint killed for a second: requests before
the outage are answered, those during it get a 503 (never a hang), and the
table is written. The figures themselves are the README's, not a test's.
"""

from __future__ import annotations

import json

import pytest

from evaluation.bench.gateway import GatewayBenchConfig, run_gateway_bench, to_markdown, write_results
from tests.serving.test_export import REPO, bfcl_requests, bfcl_sample, exported, tiny_router_dir  # noqa: F401

pytestmark = pytest.mark.integration


def test_a_short_run_with_every_endpoint_killed_answers_then_fails_fast(exported, shared_data, tmp_path):  # noqa: F811
    cfg = GatewayBenchConfig(router_dir=exported[0], data_root=shared_data, pool=REPO / "configs" / "pool.yaml",
                             requests=30, concurrency=2, kill=["all"], kill_at=6, kill_for_s=1.0, max_seconds=120)
    result = run_gateway_bench(cfg)
    s = result.summary()
    statuses = [o.status for o in result.outcomes]
    assert s["requests"] == 30 and set(statuses) <= {200, 502, 503}, statuses
    assert statuses[:4] == [200] * 4 and 503 in statuses  # answered before the outage, fast 503s during it
    assert s["lost"] == statuses.count(502) + statuses.count(503) and s["max_503_ms"] is not None
    assert len(result.killed) == 4 and result.metrics["switchcraft_circuit_opens_total"] >= 1
    write_results(result, tmp_path / "bench.md")
    assert (tmp_path / "bench.md").read_text().startswith("`switchcraft bench gateway` — 30 requests at concurrency 2")
    assert json.loads((tmp_path / "bench.json").read_text())["summary"]["requests"] == 30
    assert "| ok | failed (by status) | lost |" in to_markdown(result)


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
