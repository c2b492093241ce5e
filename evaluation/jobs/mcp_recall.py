"""find_tools through the MCP gateway against the in-process tool router: Recall@K on a held-out tool-retrieval set.

    switchcraft bench mcp-recall                                  # MetaTool, 2,000 held-out queries
    switchcraft bench mcp-recall --bench seal_tools --limit 0     # every held-out query → runs/mcp/recall_<bench>.json

The benchmark's catalog is one upstream MCP server (the bench fleet, evaluation/mcp_fleet.py) behind the
gateway (keys off, base MiniLM), each query a `find_tools(query, k=10)` over HTTP, ranked against the in-process
tool router over the benchmark's catalog and over the gateway's cards. Method and figures: docs/mcp.md.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import numpy as np

KS = (1, 3, 5, 10)


def server_name(bench: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", bench)[:32]


def router_over(catalog, encoder, retrieval):
    from serving.tools.index import ToolIndex
    from serving.tools.policy import AccessPolicy
    from serving.tools.router import ToolRouter

    return ToolRouter(ToolIndex.build(catalog, None, encoder=encoder), AccessPolicy(), retrieval)


def ranked(router, query: str, k: int, Q: np.ndarray | None = None) -> tuple[list[int], np.ndarray]:
    """The router's top k over its whole catalog for `query` (the ranking find_tools and `tools eval` use)."""
    texts = router.intents(query)
    Q = router._vectors(texts, None) if Q is None else Q
    everything = np.ones(len(router.catalog), dtype=bool)
    return [int(i) for i in router.top(router.fuse(texts, Q, everything)[0], k)], Q


def find_through_gateway(work: Path, name: str, catalog, queries, encoder):
    """(find_tools' top-10 names per query, the gateway's snapshot, its config, seconds to serving)."""
    from evaluation.mcp_fleet import Rpc, start_fleet
    from evaluation.harness import stop
    from evaluation.harness import Loopback
    from serving.mcp import McpGateway, http_app
    from serving.mcp.config import McpConfig

    defs = [{"name": c.key, "description": c.description, "inputSchema": c.parameters} for c in catalog.cards]
    fleet, base = start_fleet(work, {name: defs})
    try:
        cfg = McpConfig.model_validate({"auth": {"mode": "none"}, "index_dir": None, "log_path": None,
                                        "upstreams": [{"name": name, "url": f"{base}/{name}/mcp", "timeout_s": 120}]})
        gw = McpGateway.from_config(cfg, encoder=encoder)
        t0 = time.perf_counter()
        with Loopback(http_app(gw), start_timeout_s=600, log_level="warning") as url:
            ready_s, rpc = time.perf_counter() - t0, Rpc()
            found = [[t["name"] for t in rpc(url + "/mcp", "tools/call", {"name": "find_tools", "arguments": {
                "query": q.text, "k": 10}})[1]["structuredContent"]["tools"]] for q in queries]
    finally:
        stop(fleet)
    return found, gw.snap, cfg, ready_s


def run(bench_name: str = "metatool", limit: int = 2000, data_root: str = "../shared/data",
        run_dir: str = "runs/mcp", seed: int = 0, encoder=None) -> dict:
    from evaluation.tools.data import read_benchmark
    from evaluation.tools.metrics import recall_at
    from serving.tools.catalog import Catalog

    if encoder is None:
        from serving.tools.encoder import MiniLMEncoder

        encoder = MiniLMEncoder.load()
    bench = read_benchmark(bench_name, data_root, heldout=True)
    queries = bench.queries
    if limit and len(queries) > limit:
        queries = sorted(random.Random(seed).sample(queries, limit), key=lambda q: q.id)
    work, name = Path(run_dir), server_name(bench_name)
    work.mkdir(parents=True, exist_ok=True)
    found, snap, cfg, ready_s = find_through_gateway(work, name, bench.catalog, queries, encoder)
    own = router_over(bench.catalog, encoder, cfg.retrieval)
    theirs = router_over(Catalog(snap.catalog.cards, snap.catalog.groups.values()), encoder, cfg.retrieval)
    exposed, keys = [c.exposed_name for c in snap.catalog.cards], [c.key for c in bench.catalog.cards]
    prefix = f"{name}{cfg.separator}"
    rankings = {"in_process": [], "find_tools": [], "in_process_gateway_catalog": []}
    same = 0
    for q, names in zip(queries, found):
        mine, Q = ranked(own, q.text, 10)
        gw_names = [exposed[i] for i in ranked(theirs, q.text, 10, Q)[0]]  # same texts and encoder: same vectors
        same += gw_names == names
        rankings["in_process"].append([keys[i] for i in mine])
        rankings["find_tools"].append([n.removeprefix(prefix) for n in names])
        rankings["in_process_gateway_catalog"].append([n.removeprefix(prefix) for n in gw_names])
    recall = {m: {f"recall@{k}": round(float(np.mean([recall_at(r, q.needed, k) for q, r in zip(queries, rs)])), 4)
                  for k in KS} for m, rs in rankings.items()}
    record = {"benchmark": bench.name, "queries": len(queries), "held_out": len(bench.queries),
              "tools": len(bench.catalog), "served": len(snap.catalog), "skipped": snap.skipped,
              "ready_s": round(ready_s, 2), "recall": recall,
              "same_top10_as_in_process_gateway_catalog": round(same / max(len(queries), 1), 4),
              "retrieval": cfg.retrieval.model_dump(mode="json"), "encoder": getattr(encoder, "name", "")}
    (work / f"recall_{name}.json").write_text(json.dumps(record, indent=2))
    return record
