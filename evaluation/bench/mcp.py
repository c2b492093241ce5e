"""What the MCP gateway adds: tools/list and tools/call through it, against the same upstream server directly.

    switchcraft bench mcp                                  # 10 upstream servers, 1,000 tools → runs/mcp/bench.json
    switchcraft bench mcp --servers 10 --tools 1000 --requests 500 --run-dir runs/mcp

Three processes on loopback: the upstream fleet (evaluation/bench/_mcp_fleet.py: N Streamable HTTP servers, the
tools split evenly, every call answered at once), the gateway (`switchcraft mcp serve` in front of all N, keys
off, the call log on as in service, the base MiniLM encoder with int8 queries) and this client. The tools are
real: the first 1,000 distinct BFCL function docs (thousand_tools), as MCP definitions. One client, one request
at a time on a kept-alive connection, direct and through requests alternated so that drift hits both alike:
`tools/list` of one server's 100 tools (direct) against `/mcp/<server>` (the same 100, through), `tools/call`
of one tool both ways; the added P50/P99 is through minus direct. Also, through only: `/mcp`'s list (the
meta-tools and the safe default set) and `find_tools` over all 1,000 tools (queries: tool descriptions'
first sentences, shuffled). And how long the gateway took from start to serving the 1,000 tools.
"""

from __future__ import annotations

import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from evaluation.harness import free_port
from evaluation.bench._support import Spawned, serve_mcp_gateway, spawn

PROTOCOL = "2026-07-28"
NAME_OK = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def fleet_tools(n: int, data_root: str) -> list[dict]:
    """n MCP tool definitions: the first distinct BFCL function docs (synthetic ones when the data is missing)."""
    from serving.tools.loaders import card_from_entry

    path = Path(data_root) / "bfcl_v4_outputs" / "thousand_tools" / "all_unique_functions.json"
    out, seen = [], set()
    rows = json.loads(path.read_text()) if path.exists() else []
    for row in rows:
        fn = row.get("function") or {}
        name = fn.get("name", "")
        if not NAME_OK.match(name) or name in seen:
            continue
        seen.add(name)
        card = card_from_entry({"type": "function", "function": fn})
        out.append({"name": name, "description": fn.get("description", ""), "inputSchema": card.parameters})
        if len(out) == n:
            return out
    for i in range(len(out), n):  # no shared data: synthetic tools
        out.append({"name": f"tool_{i}", "description": f"Synthetic tool {i}: returns its name.",
                    "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}})
    return out


class Rpc:
    """JSON-RPC over Streamable HTTP (the 2026-07-28 per-request envelope; stateless servers): one POST a call."""

    def __init__(self) -> None:
        import httpx2

        self.http = httpx2.Client(timeout=60.0)
        self.n = 0

    def __call__(self, url: str, method: str, params: dict | None = None) -> tuple[float, dict]:
        self.n += 1
        meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
        body = {"jsonrpc": "2.0", "id": self.n, "method": method, "params": {**(params or {}), "_meta": meta}}
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": PROTOCOL,
                   "mcp-method": method}
        if params and "name" in params:
            headers["mcp-name"] = params["name"]
        t0 = time.perf_counter()
        r = self.http.post(url, json=body, headers=headers)
        ms = (time.perf_counter() - t0) * 1e3
        answer = r.json()
        if r.status_code != 200 or "error" in answer:
            raise RuntimeError(f"{method} {url}: HTTP {r.status_code} {json.dumps(answer)[:300]}")
        return ms, answer["result"]


def wait_for(check, what: str, timeout_s: float, proc: subprocess.Popen | Spawned) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        try:
            if check():
                return time.perf_counter() - t0
        except Exception:  # not listening yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready after {timeout_s:.0f} s")


def pct(xs: list[float]) -> dict:
    return {"p50": round(float(np.percentile(xs, 50)), 3), "p99": round(float(np.percentile(xs, 99)), 3)}


def run(servers: int = 10, tools: int = 1000, requests: int = 500, data_root: str = "../shared/data",
        run_dir: str = "runs/mcp") -> dict:

    work = Path(run_dir)
    work.mkdir(parents=True, exist_ok=True)
    defs = fleet_tools(tools, data_root)
    (work / "bench_tools.json").write_text(json.dumps(defs))
    fleet_port, gw_port = free_port(), free_port()
    cfg = {"port": gw_port, "auth": {"mode": "none"}, "index_dir": str(work / "index"),
           "log_path": str(work / "bench_calls.jsonl"), "max_default_tools": 20,
           "upstreams": [{"name": f"s{i}", "url": f"http://127.0.0.1:{fleet_port}/s{i}/mcp"} for i in range(servers)]}
    (work / "bench_mcp.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = []
    try:
        fleet = subprocess.Popen([sys.executable, "-m", "evaluation.bench._mcp_fleet", "--tools",
                                  str(work / "bench_tools.json"), "--servers", str(servers), "--port", str(fleet_port)],
                                 env=env, stderr=subprocess.DEVNULL)
        procs.append(fleet)
        rpc = Rpc()
        direct = f"http://127.0.0.1:{fleet_port}/s0/mcp"
        wait_for(lambda: rpc(direct, "tools/list"), "the upstream fleet", 60, fleet)
        gateway = spawn(serve_mcp_gateway, work / "bench_mcp.yaml", env=env)
        procs.append(gateway)
        through = f"http://127.0.0.1:{gw_port}/mcp"
        # Ready when every group lists its tools (/healthz names them to an admin key only; this one has none).
        ready_s = wait_for(lambda: sum(len(rpc(f"{through}/s{i}", "tools/list")[1]["tools"]) for i in range(servers))
                           == tools, "the gateway", 900, gateway)
        one = defs[0]
        args = {k: 1 for k in (one["inputSchema"].get("required") or [])}
        ops = {
            "tools/list direct": lambda: rpc(direct, "tools/list"),
            "tools/list through": lambda: rpc(f"{through}/s0", "tools/list"),
            "tools/call direct": lambda: rpc(direct, "tools/call", {"name": one["name"], "arguments": args}),
            "tools/call through": lambda: rpc(f"{through}/s0", "tools/call",
                                              {"name": f"s0__{one['name']}", "arguments": args}),
            "/mcp tools/list": lambda: rpc(through, "tools/list"),
        }
        sizes = {"tools/list direct": len(ops["tools/list direct"]()[1]["tools"]),
                 "tools/list through": len(ops["tools/list through"]()[1]["tools"]),
                 "/mcp tools/list": len(ops["/mcp tools/list"]()[1]["tools"])}
        times: dict[str, list[float]] = {k: [] for k in ops}
        for _ in range(20):  # warm-up: connections, caches, the first query embeddings
            for f in ops.values():
                f()
        for _ in range(requests):
            for name, f in ops.items():
                times[name].append(f()[0])
        rng = random.Random(0)
        queries = [re.split(r"(?<=[.!?])\s", d["description"])[0] for d in defs if d["description"]]
        rng.shuffle(queries)
        find = [rpc(through, "tools/call", {"name": "find_tools", "arguments": {"query": q}})[0]
                for q in (queries * (requests // max(len(queries), 1) + 1))[:requests]]
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    stats = {k: pct(v) for k, v in times.items()}
    record = {
        "servers": servers, "tools": tools, "requests": requests, "listed": sizes, "ready_s": round(ready_s, 2),
        "ms": {**stats, "find_tools (1,000 tools)": pct(find)},
        "added_ms": {op: {q: round(stats[f"{op} through"][q] - stats[f"{op} direct"][q], 3) for q in ("p50", "p99")}
                     for op in ("tools/list", "tools/call")},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    (work / "bench.json").write_text(json.dumps(record, indent=2))
    return record


def main(servers: int, tools: int, requests: int, data_root: str, run_dir: str) -> None:
    from rich.table import Table

    from rich.console import Console

    console = Console()

    r = run(servers, tools, requests, data_root, run_dir)
    t = Table(title=f"MCP gateway, {r['servers']} upstream servers, {r['tools']} tools "
                    f"({r['requests']} requests each; ready in {r['ready_s']} s)")
    for col in ("operation", "P50 ms", "P99 ms", "added P50", "added P99"):
        t.add_column(col, justify="left" if col == "operation" else "right")
    for op, s in r["ms"].items():
        base = op.rsplit(" ", 1)[0]
        added = r["added_ms"].get(base) if op.endswith("through") else None
        t.add_row(op, f"{s['p50']:.2f}", f"{s['p99']:.2f}", f"{added['p50']:.2f}" if added else "",
                  f"{added['p99']:.2f}" if added else "")
    console.print(t)
    console.print(f"→ {Path(run_dir) / 'bench.json'}")
