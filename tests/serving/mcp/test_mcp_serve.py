"""`switchcraft mcp serve` as an operator runs it: the shipped config's files server, an unauthenticated server
beyond loopback refused at start, and slow clients closed (the chat gateway's header and body deadlines).

    .venv/bin/python -m pytest -q tests/serving/mcp/test_mcp_serve.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
import yaml
from mcp.shared.exceptions import MCPError

from serving.core.auth import KeyEntry, KeyStore
from tests.serving.mcp.conftest import free_port, gateway_on, sdk_client, toy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[3]
KEY = "sk-sc-test-nobody-0123456789abcdef"


def test_the_shipped_config_serves_a_folder_holding_nothing_private(tmp_path, encoder):
    """A key with no roles reads the demo folder, and nothing beside it: not the working directory, where runs/
    (the decision log, request texts) lives."""
    from serving.mcp.config import load_mcp_config

    shipped = load_mcp_config(REPO / "configs" / "mcp.yaml")
    files = next(u for u in shipped.upstreams if u.name == "files")
    folder = (REPO / files.args[-1]).resolve()
    assert folder.is_dir() and folder != REPO and REPO in folder.parents
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "notes.txt"]
    upstream = {**files.model_dump(), "cwd": str(REPO), "command": str(REPO / files.command)}
    keys = KeyStore([KeyEntry(id="nobody", key=KEY, caller={})])

    async def reads(url: str):
        async with sdk_client(url + "/mcp/files", KEY) as c:
            listing = (await c.call_tool("files__list_directory", {"path": str(folder)})).content[0].text
            outside = []
            for path in (REPO / "README.md", REPO / "runs"):
                try:
                    result = await c.call_tool("files__read_text_file", {"path": str(path)})
                    outside.append(result.content[0].text)
                except MCPError as e:
                    outside.append(e.message)
        return listing, outside

    with gateway_on(tmp_path, encoder, [upstream], keys=keys, policy=shipped.policy.model_dump()) as (_, url):
        listing, outside = anyio.run(reads, url)
    assert "README.md" in listing and "notes.txt" in listing
    for text in outside:
        assert "Access denied - path outside allowed directories" in text, text


def serve(config: Path, *sets: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "switchcraft.cli", "mcp", "serve", "--config", str(config),
                             *[a for s in sets for a in ("--set", s)]], cwd=REPO, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_an_unauthenticated_server_beyond_loopback_does_not_start(tmp_path):
    config = tmp_path / "mcp.yaml"
    config.write_text(yaml.safe_dump({"upstreams": [toy(tmp_path)], "auth": {"mode": "none"}}))
    proc = serve(config, "host=0.0.0.0", f"port={free_port()}")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in out, out
    assert "host '0.0.0.0' is not loopback and auth.mode is none" in " ".join(out.split()), out
    assert "auth.allow_unauthenticated_remote: true to insist" in " ".join(out.split()), out


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.slow
def test_slow_clients_are_closed_and_foreign_hosts_refused(tmp_path):
    port = free_port()
    config = tmp_path / "mcp.yaml"
    config.write_text(yaml.safe_dump({"upstreams": [toy(tmp_path)], "index_dir": None,
                                      "log_path": str(tmp_path / "calls.jsonl"), "auth": {"keys_file": None}}))
    env = {"SWITCHCRAFT_GATEWAY_KEYS": json.dumps([{"id": "k", "key": KEY}])}
    proc = serve(config, "host=0.0.0.0", f"port={port}", "header_timeout_s=1", "body_timeout_s=1", env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert proc.poll() is None, proc.stdout.read()
        base = open_fds(proc.pid)
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        for s in slow:  # headers begun, never finished; no key
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(0.3)
        assert open_fds(proc.pid) >= base + 190  # held open while the headers are late
        answers = []
        for s in slow:
            s.settimeout(10)
            got = b""
            while chunk := s.recv(4096):
                got += chunk
            answers.append(got.split(b"\r\n", 1)[0])
            s.close()
        assert answers == [b"HTTP/1.1 408 Request Timeout"] * 200
        time.sleep(0.5)
        assert open_fds(proc.pid) < base + 10

        with socket.create_connection(("127.0.0.1", port)) as s:  # a body that never arrives, with a key
            s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"".encode())
            s.settimeout(10)
            got = b""
            while chunk := s.recv(4096):
                got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), got
        assert json.loads(body)["error"]["message"] == "request body not received within 1 s; send it faster or retry"

        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        r = httpx.post(url + "/mcp", json=listing, headers={"authorization": f"Bearer {KEY}", "host": "evil.example",
                                                            "accept": "application/json"}, timeout=30)
        assert r.status_code == 421 and r.json()["error"]["message"] == "Invalid Host header (allowed_hosts)"
    finally:
        proc.terminate()
        proc.wait(30)
