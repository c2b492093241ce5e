"""`switchcraft bench tools` on a small real catalog (MetaTool's first 120 tools, the base MiniLM encoder): the
latency record and the per-stage CPU record, their figures sane.

    .venv/bin/python -m pytest -q tests/evaluation/bench/test_tools.py
"""

from __future__ import annotations

import json

import pytest
from threadpoolctl import threadpool_limits

from evaluation.bench.tools import run, stage_cpu
from tests.routers import REPO

CONFIG = str(REPO / "configs" / "tools.yaml")


def ordered(p: dict) -> bool:
    return 0 <= p["p50"] <= p.get("p90", p["p50"]) <= p["p99"] <= p.get("max", p["p99"])


@pytest.mark.slow
def test_bench_tools_routes_distinct_real_queries_and_times_each_stage(shared_data, tmp_path):
    if not (shared_data / "tool_retrieval" / "metatool").exists():
        pytest.skip(f"{shared_data}/tool_retrieval/metatool is missing (the tool-retrieval data)")
    args = (120, 15, str(shared_data), str(tmp_path), CONFIG, ["encoder=null"])
    with threadpool_limits(1):
        rec = run(*args, "bench_small.json", sources=("metatool",))
        stages = stage_cpu(*args[:5], ["encoder=null"], head=0.3, rounds=2, sources=("metatool",))
    assert rec["tools"] == 120 and rec["visible_tools"] == 96 and rec["queries"] == 15  # a fifth restricted
    assert ordered(rec["ms"]) and ordered(rec["cpu_ms"]) and rec["ms"]["p50"] > 0 and rec["cold_filter_ms"] > 0
    assert sum(v["requests"] for v in rec["by_asks_ms"].values()) == 15
    assert rec["stage_ms_p50"]["embed"] > 0 and rec["overrides"] == ["encoder=null"]
    assert json.loads((tmp_path / "bench_small.json").read_text())["ms"] == rec["ms"]
    cpu = stages["thread_cpu_ms"]
    assert stages["requests"] == 15 and set(cpu) == {"embed", "bm25", "fuse", "select", "pick", "bind",
                                                     "pick_sibling_fill", "route_without_embed", "route"}
    assert all(ordered(p) for p in cpu.values()) and cpu["route"]["p50"] >= cpu["route_without_embed"]["p50"] > 0
    assert 0 <= stages["requests_whose_exposed_set_changes_with_sibling_fill"] <= 15
