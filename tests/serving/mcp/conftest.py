"""A real MCP gateway on loopback in front of the npm reference servers (node/, `make install`), over stdio.

One gateway per test module (`mcp_gateway`): uvicorn on a thread of its own, with its own event loop, which
runs the upstream connections; tests drive it with the official SDK's client over Streamable HTTP. A module
may set `MCP_AUTH = "none"` (no keys) and `MCP_UPSTREAMS` (the servers it needs, by name).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from evaluation.harness import Loopback, free_port

NODE_BIN = Path(__file__).resolve().parents[3] / "node" / "node_modules" / ".bin"
KEYS = {  # key id → (key, caller)
    "admin": ("sk-sc-test-admin-0123456789abcdef", {"roles": ["admin"]}),
    "analyst": ("sk-sc-test-analyst-0123456789abcd", {"roles": ["analyst"]}),
    "anon": ("sk-sc-test-anon-0123456789abcdefg", {}),
}


def server_bin(name: str) -> str:
    path = NODE_BIN / name
    if not path.exists():
        pytest.skip(f"{path} is missing: run `make install` (npm ci --prefix node)")
    return str(path)


@dataclass
class Running:
    url: str
    gateway: object
    root: Path
    log: Path

    def client(self, key: str | None, path: str = "/mcp", **kw):
        """An SDK client on `path` with the key of id `key` (None: no Authorization header)."""
        return sdk_client(self.url + path, KEYS[key][0] if key else None, **kw)


@asynccontextmanager
async def sdk_client(url: str, key: str | None, **kw):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(streamable_http_client(url, http_client=http), **kw) as client:
            yield client


@pytest.fixture(scope="module")
def mcp_gateway(encoder, tmp_path_factory, request):
    import uvicorn

    from serving.core.auth import KeyEntry, KeyStore
    from serving.mcp import McpGateway, http_app
    from serving.mcp.config import McpConfig

    root = tmp_path_factory.mktemp("files")
    (root / "notes.txt").write_text("the launch code is 4242\n")
    work = tmp_path_factory.mktemp("mcp")
    upstreams = [
        {"name": "files", "command": server_bin("mcp-server-filesystem"), "args": [str(root)],
         "tools": {p: {"permissions": ["files.write"]} for p in ("write_file", "edit_file", "move_file",
                                                                   "create_directory")}},
        {"name": "memory", "command": server_bin("mcp-server-memory"),
         "env": {"MEMORY_FILE_PATH": str(work / "memory.jsonl")}, "defaults": {"permissions": ["memory.use"]}},
        {"name": "everything", "command": server_bin("mcp-server-everything"), "args": ["stdio"], "timeout_s": 20},
    ]
    wanted = getattr(request.module, "MCP_UPSTREAMS", None)
    cfg = McpConfig.model_validate({
        "port": free_port(),
        "upstreams": [u for u in upstreams if wanted is None or u["name"] in wanted],
        "retry_s": [0.2, 1.0],
        "policy": {"role_max_risk": {"admin": "irreversible"},
                   "role_permissions": {"admin": ["files.write", "memory.use", "open_world"], "analyst": ["memory.use"]}},
        "auth": {"mode": getattr(request.module, "MCP_AUTH", "keys")},
        "log_path": str(work / "calls.jsonl"),
    })
    keys = None
    if cfg.auth.mode == "keys":
        keys = KeyStore([KeyEntry(id=k, key=v[0], caller=v[1]) for k, v in KEYS.items()])
    gw = McpGateway.from_config(cfg, encoder=encoder, keys=keys)
    server = uvicorn.Server(uvicorn.Config(http_app(gw), host="127.0.0.1", port=cfg.port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 120
    while not server.started and thread.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "the MCP gateway did not start"
    yield Running(f"http://127.0.0.1:{cfg.port}", gw, root, work / "calls.jsonl")
    server.should_exit = True
    thread.join(30)


TOY = str(Path(__file__).with_name("toy_server.py"))


def toy(tmp_path: Path, name: str = "toy", **fields) -> dict:
    """An upstream entry for tests/serving/mcp/toy_server.py (its tool file and log under tmp_path)."""
    return {"name": name, "command": sys.executable, "args": [TOY],
            "env": {"TOY_TOOLS": str(tmp_path / f"{name}_tools.json"), "TOY_LOG": str(tmp_path / f"{name}_log.jsonl")},
            **fields}


@contextmanager
def gateway_on(tmp_path: Path, encoder, upstreams: list[dict], keys=None, **fields):
    """A gateway for `upstreams` on a free loopback port (keys off unless `keys`, a KeyStore): (gateway, url)."""
    from serving.mcp import McpGateway, http_app
    from serving.mcp.config import McpConfig

    port = free_port()
    cfg = McpConfig.model_validate({"port": port, "upstreams": upstreams, "auth": {"mode": "keys" if keys else "none"},
                                    "index_dir": None, "log_path": str(tmp_path / f"calls-{port}.jsonl"),
                                    "retry_s": [0.2, 1.0], **fields})
    gw = McpGateway.from_config(cfg, encoder=encoder, keys=keys)
    with Loopback(http_app(gw), port=port, start_timeout_s=600, log_level="warning") as url:
        yield gw, url


def children_running(marker: str) -> list[int]:
    """PIDs of this process's children whose command line holds `marker` (the upstream servers)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and marker in cmd:
            out.append(int(pid))
    return out


def structured(result) -> dict:
    return result.structured_content or json.loads(result.content[0].text)
