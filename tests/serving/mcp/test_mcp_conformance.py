"""@modelcontextprotocol/conformance (node/, `make install`) against the gateway, every applicable scenario.

Applicable: the handshake, ping, tools/list, DNS-rebinding protection and the SSE streams. Not applicable (see
docs/mcp.md, "Conformance"): the tools-call-* and elicitation scenarios call the suite's own fixture tools
(`test_simple_text`, …) by their bare names, which a gateway only serves namespaced and only from its upstreams;
resources-*, prompts-*, completion-complete and logging-set-level test capabilities the gateway does not offer
(it serves tools only). The suite sends no key, so this gateway runs with auth.mode none.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.serving.mcp.conftest import server_bin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
MCP_AUTH = "none"
MCP_UPSTREAMS = ["everything"]
SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection", "server-sse-multiple-streams"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance(mcp_gateway, scenario):
    run = subprocess.run([server_bin("conformance"), "server", "--url", mcp_gateway.url + "/mcp",
                          "--scenario", scenario], capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and " 0 failed" in out, out[-3000:]
