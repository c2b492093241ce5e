"""What the MCP gateway adds: tools/list and tools/call through it, against the same upstream server directly.

    switchcraft bench mcp --servers 10 --tools 1000 --requests 500 --run-dir runs/mcp    # → runs/mcp/bench.json

Method and figures: docs/mcp.md ("Performance").
"""

from __future__ import annotations

import os
import platform
import random
import re
from pathlib import Path

from evaluation.mcp_fleet import McpStack, Rpc, fleet_tools
from evaluation.bench._support import md_table, percentiles, write_json


def run(servers: int = 10, tools: int = 1000, requests: int = 500, data_root: str = "../shared/data",
        run_dir: str = "runs/mcp") -> dict:
    work = Path(run_dir)
    work.mkdir(parents=True, exist_ok=True)
    defs = fleet_tools(tools, data_root)
    with McpStack(work, defs, servers, log_path=str(work / "bench_calls.jsonl"), max_default_tools=20) as mcp:
        rpc, one = Rpc(), defs[0]
        args = {k: 1 for k in (one["inputSchema"].get("required") or [])}
        ops = {
            "tools/list direct": lambda: rpc(mcp.direct("s0"), "tools/list"),
            "tools/list through": lambda: rpc(f"{mcp.url}/s0", "tools/list"),
            "tools/call direct": lambda: rpc(mcp.direct("s0"), "tools/call", {"name": one["name"], "arguments": args}),
            "tools/call through": lambda: rpc(f"{mcp.url}/s0", "tools/call",
                                              {"name": f"s0__{one['name']}", "arguments": args}),
            "/mcp tools/list": lambda: rpc(mcp.url, "tools/list"),
        }
        listed = {k: len(ops[k]()[1]["tools"]) for k in ("tools/list direct", "tools/list through", "/mcp tools/list")}
        for _ in range(20):  # warm-up: connections, caches, the first query embeddings
            for f in ops.values():
                f()
        times: dict[str, list[float]] = {k: [] for k in ops}
        for _ in range(requests):
            for name, f in ops.items():
                times[name].append(f()[0])
        queries = [re.split(r"(?<=[.!?])\s", d["description"])[0] for d in defs if d["description"]]
        random.Random(0).shuffle(queries)
        find = [rpc(mcp.url, "tools/call", {"name": "find_tools", "arguments": {"query": q}})[0]
                for q in (queries * (requests // max(len(queries), 1) + 1))[:requests]]
    stats = {k: percentiles(v, key="p{}", ndigits=3) for k, v in times.items()}
    record = {
        "servers": servers, "tools": tools, "requests": requests, "listed": listed, "ready_s": round(mcp.ready_s, 2),
        "ms": {**stats, "find_tools (1,000 tools)": percentiles(find, key="p{}", ndigits=3)},
        "added_ms": {op: {q: round(stats[f"{op} through"][q] - stats[f"{op} direct"][q], 3) for q in ("p50", "p99")}
                     for op in ("tools/list", "tools/call")},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    write_json(work / "bench.json", record)
    return record


def to_markdown(r: dict) -> str:
    rows = []
    for op, s in r["ms"].items():
        added = r["added_ms"].get(op.rsplit(" ", 1)[0]) if op.endswith("through") else None
        rows.append([op, f"{s['p50']:.2f}", f"{s['p99']:.2f}", *(f"{added[q]:+.2f}" if added else "" for q in ("p50", "p99"))])
    return "\n".join([f"MCP gateway, {r['servers']} upstream servers, {r['tools']} tools ({r['requests']} requests "
                      f"each; ready in {r['ready_s']} s)", "",
                      *md_table(["operation", "P50 ms", "P99 ms", "added P50", "added P99"], rows, "lrrrr")])
