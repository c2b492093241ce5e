"""find_tools through the MCP gateway against the in-process tool router: Recall@K on a held-out tool-retrieval set.

    switchcraft bench mcp-recall                                  # MetaTool, 2,000 held-out queries
    switchcraft bench mcp-recall --bench seal_tools --limit 0     # every held-out query
    → runs/mcp/recall_<bench>.json

The benchmark's catalog (evaluation/tools/data.py) is served as one upstream
MCP server (the bench fleet, evaluation/bench/_mcp_fleet.py: Streamable HTTP,
its own process) named after the benchmark, its tools as MCP definitions (name
= the card's key, description, input schema). The gateway (serving/mcp, keys
off, the base MiniLM encoder as a numpy model, the gateway's default
`retrieval:`) runs in front of it on loopback, and every query is a
`tools/call find_tools(query, k=10)` over HTTP. Three rankings per query, the
same encoder and retrieval settings in all three:

- `in_process`: the tool router over the benchmark's own catalog, as `switchcraft tools eval` ranks
  (`hybrid+intents`: the router's fusion over the whole catalog, then its top);
- `find_tools`: what the gateway answered;
- `in_process_gateway_catalog`: the tool router, built from scratch, over the cards the gateway made of the
  upstream's listing (each name now under the server's namespace, `metatool.timeport`).

`find_tools` against the third is the parity check: the same top 10 for every
query means serving through MCP (listing, namespacing, the incremental index,
the permission mask, JSON over HTTP) changes nothing. Against the first, the
difference is what the namespace alone does to retrieval.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

KS = (1, 3, 5, 10)


def server_name(bench: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", bench)[:32]


def upstream_defs(catalog) -> list[dict]:
    """The catalog's cards as MCP tool definitions (name = the card's key)."""
    return [{"name": c.key, "description": c.description, "inputSchema": c.parameters} for c in catalog.cards]


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


def run(bench_name: str = "metatool", limit: int = 2000, data_root: str = "../shared/data",
        run_dir: str = "runs/mcp", seed: int = 0, encoder=None) -> dict:
    from evaluation.bench.mcp import Rpc, wait_for
    from evaluation.harness import free_port
    from evaluation.tools.data import read_benchmark
    from evaluation.tools.metrics import recall_at
    from evaluation.harness import Loopback
    from serving.mcp import McpGateway, http_app
    from serving.mcp.config import McpConfig
    from serving.tools.catalog import Catalog

    if encoder is None:
        from serving.tools.encoder import MiniLMEncoder

        encoder = MiniLMEncoder.load()
    bench = read_benchmark(bench_name, data_root, heldout=True)
    queries = bench.queries
    if limit and len(queries) > limit:
        queries = sorted(random.Random(seed).sample(queries, limit), key=lambda q: q.id)
    work = Path(run_dir)
    work.mkdir(parents=True, exist_ok=True)
    name = server_name(bench_name)
    (work / f"recall_{name}_tools.json").write_text(json.dumps({name: upstream_defs(bench.catalog)}))
    fleet_port, gw_port = free_port(), free_port()
    cfg = McpConfig.model_validate({
        "port": gw_port, "auth": {"mode": "none"}, "index_dir": None, "log_path": None,
        "upstreams": [{"name": name, "url": f"http://127.0.0.1:{fleet_port}/{name}/mcp", "timeout_s": 120}]})
    fleet = subprocess.Popen([sys.executable, "-m", "evaluation.bench._mcp_fleet", "--tools",
                              str(work / f"recall_{name}_tools.json"), "--port", str(fleet_port)],
                             stderr=subprocess.DEVNULL)
    server = None
    try:
        rpc = Rpc()
        wait_for(lambda: rpc(f"http://127.0.0.1:{fleet_port}/{name}/mcp", "tools/list"), "the upstream fleet", 120,
                 fleet)
        gw = McpGateway.from_config(cfg, encoder=encoder)
        t0 = time.perf_counter()
        server = Loopback(http_app(gw), port=gw_port, start_timeout_s=600, log_level="warning")
        server.start()
        ready_s = time.perf_counter() - t0
        snap = gw.snap
        through = f"http://127.0.0.1:{gw_port}/mcp"
        found = []
        for q in queries:
            _, result = rpc(through, "tools/call", {"name": "find_tools", "arguments": {"query": q.text, "k": 10}})
            found.append([t["name"] for t in result["structuredContent"]["tools"]])
    finally:
        if server is not None:
            server.stop()
        fleet.terminate()
        fleet.wait(10)
    own = router_over(bench.catalog, encoder, cfg.retrieval)
    theirs = router_over(Catalog(snap.catalog.cards, snap.catalog.groups.values()), encoder, cfg.retrieval)
    exposed = [c.exposed_name for c in snap.catalog.cards]
    keys = [c.key for c in bench.catalog.cards]
    prefix = f"{name}{cfg.separator}"
    rankings = {"in_process": [], "find_tools": [], "in_process_gateway_catalog": []}
    same = 0
    for q, names in zip(queries, found):
        mine, Q = ranked(own, q.text, 10)
        # The same texts and encoder: the query vectors are the same, so they are embedded once.
        gw_rows, _ = ranked(theirs, q.text, 10, Q)
        gw_names = [exposed[i] for i in gw_rows]
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
