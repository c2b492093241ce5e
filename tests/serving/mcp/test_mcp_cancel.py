"""Slow upstream calls (tests/serving/mcp/toy_server.py `sleep`, the official SDK over stdio): past the upstream's
`timeout_s` the host gets a clear -32001 and the upstream's request is cancelled; a host cancelling its call
cancels the upstream's request too; the gateway keeps serving after both."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.serving.mcp.conftest import gateway_on, sdk_client, toy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def events(tmp_path: Path) -> list[str]:
    path = tmp_path / "toy_log.jsonl"
    return [json.loads(line)["event"] for line in path.read_text().splitlines()] if path.exists() else []


def wait_for_event(tmp_path: Path, event: str, timeout_s: float = 15.0) -> float:
    t0 = time.monotonic()
    while event not in events(tmp_path):
        assert time.monotonic() - t0 < timeout_s, f"the upstream never logged {event!r}: {events(tmp_path)}"
        time.sleep(0.05)
    return time.monotonic() - t0


def outcomes(gw) -> list[tuple[str, str]]:
    return [(r["tool"], r["outcome"]) for r in map(json.loads, Path(gw.cfg.log_path).read_text().splitlines())]


async def ping(url: str) -> str:
    async with sdk_client(url + "/mcp/toy", None) as c:
        return (await c.call_tool("toy__ping", {})).content[0].text


def test_upstream_timeout_is_a_clear_error_and_cancels_upstream(tmp_path, encoder):
    async def slow(url):
        async with sdk_client(url + "/mcp/toy", None) as c:
            t0 = time.monotonic()
            with pytest.raises(MCPError) as e:
                await c.call_tool("toy__sleep", {"seconds": 60})
            return e.value, time.monotonic() - t0

    with gateway_on(tmp_path, encoder, [toy(tmp_path, timeout_s=1)]) as (gw, url):
        err, took = anyio.run(slow, url)
        assert err.code == -32001 and took < 10, (err, took)
        assert err.message == "upstream 'toy' did not answer sleep within 1 s (upstreams[toy].timeout_s)"
        wait_for_event(tmp_path, "cancelled")  # the upstream's handler was cancelled, not left sleeping
        assert "done" not in events(tmp_path)
        assert anyio.run(ping, url) == "pong" and gw.upstreams[0].up
        assert ("toy__sleep", "timeout") in outcomes(gw)


def test_host_cancellation_reaches_the_upstream(tmp_path, encoder):
    async def cancelled(url):
        async with sdk_client(url + "/mcp/toy", None) as c:
            with anyio.move_on_after(1.0) as scope:
                await c.call_tool("toy__sleep", {"seconds": 60})
            return scope.cancelled_caught

    with gateway_on(tmp_path, encoder, [toy(tmp_path, timeout_s=120)]) as (gw, url):
        assert anyio.run(cancelled, url)
        assert wait_for_event(tmp_path, "cancelled") < 15
        assert "done" not in events(tmp_path)
        assert anyio.run(ping, url) == "pong"
        t0 = time.monotonic()
        while ("toy__sleep", "cancelled") not in outcomes(gw):
            assert time.monotonic() - t0 < 10, outcomes(gw)
            time.sleep(0.05)
