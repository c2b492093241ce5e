"""`switchcraft mcp …`: the tool router as an MCP gateway in front of upstream MCP servers.

    switchcraft mcp serve --config configs/mcp.yaml                      # Streamable HTTP: /mcp, /mcp/<group>
    switchcraft mcp serve --config configs/mcp.yaml --set port=8091 --set auth.keys_file=keys.yaml
    switchcraft mcp serve --config configs/mcp.yaml --stdio [--group files]   # one host over stdin/stdout
    switchcraft mcp tools --config configs/mcp.yaml [--role admin]       # the catalog as a caller sees it, then exit

Thin wrappers over `serving.mcp` (docs/mcp.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from data.errors import DataError
from switchcraft.console import err, fail

DEFAULT_CONFIG = Path("configs/mcp.yaml")
SET_HELP = "Override a config value, e.g. port=8091 or auth.mode=none (repeatable)."


def _gateway(config: Path, overrides: list[str] | None):
    from serving.mcp import McpGateway, load_mcp_config

    try:
        cfg = load_mcp_config(config, overrides or ())
        return cfg, McpGateway.from_config(cfg)
    except (DataError, ValueError, FileNotFoundError) as e:
        fail(str(e))


def register(app: typer.Typer) -> None:
    mcp_app = typer.Typer(help="The MCP gateway: upstream MCP servers behind keys, groups and find_tools.",
                          no_args_is_help=True)
    app.add_typer(mcp_app, name="mcp")

    @mcp_app.command("serve")
    def serve_cmd(
        config: Path = typer.Option(DEFAULT_CONFIG, help="The MCP gateway config."),
        stdio: bool = typer.Option(False, "--stdio", help="Serve one host over stdin/stdout instead of HTTP "
                                   "(identity: the key in $SWITCHCRAFT_MCP_KEY)."),
        group: str = typer.Option(None, help="With --stdio: serve this group's tools instead of /mcp's."),
        overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
    ) -> None:
        """Serve the MCP gateway: /mcp (find_tools, call_tool, the safe default set) and /mcp/<group>."""
        import logging
        import sys

        import anyio

        cfg, gw = _gateway(config, overrides)
        if cfg.auth.mode == "none":
            err.print("[bold yellow]warning:[/] auth.mode is none: every caller is auth.local_caller (local use only)")
        if stdio:
            from serving.mcp import serve_stdio

            logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout is the MCP channel
            try:
                anyio.run(serve_stdio, gw, group)
            except Exception as e:  # a missing or invalid key
                fail(str(getattr(e, "message", e)))
            return
        import uvicorn

        from serving.gateway.server import uvicorn_config
        from serving.mcp import http_app

        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        for noisy in ("mcp", "bm25s"):  # the SDK logs every stateless request at INFO
            logging.getLogger(noisy).setLevel(logging.WARNING)
        err.print(f"MCP gateway on http://{cfg.host}:{cfg.port}/mcp  ({len(cfg.upstreams)} upstream servers)")
        uvicorn.Server(uvicorn_config(http_app(gw), cfg)).run()  # the chat gateway's header deadline

    @mcp_app.command("tools")
    def tools_cmd(
        config: Path = typer.Option(DEFAULT_CONFIG, help="The MCP gateway config."),
        tenant: str = typer.Option("", help="Caller's tenant."),
        role: list[str] = typer.Option(None, "--role", help="Caller's role (repeatable)."),
        permission: list[str] = typer.Option(None, "--permission", help="Permission granted directly (repeatable)."),
        query: str = typer.Option(None, help="Also print find_tools' answer to this query."),
        overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
    ) -> None:
        """Connect every upstream once and print what a caller sees: /mcp, each group, find_tools; then exit."""
        import anyio

        from serving.core.auth import Identity, KeyLimits
        from serving.tools.policy import Caller

        _, gw = _gateway(config, overrides)
        ident = Identity("cli", Caller(tenant=tenant, roles=role or (), permissions=permission or ()), KeyLimits())

        async def show() -> dict:
            async with gw.running():
                out = {**gw.status(), "/mcp": [t.name for t in gw.list_tools(ident, None)]}
                for g in gw.groups_for(ident):
                    out[f"/mcp/{g}"] = [t.name for t in gw.list_tools(ident, g)]
                if query:
                    out["find_tools"] = [f["name"] for f in gw.find(ident, query, gw.cfg.find_k)]
                return out

        typer.echo(json.dumps(anyio.run(show), indent=2))
