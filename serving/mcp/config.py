"""The MCP gateway's config (`configs/mcp.yaml`): upstream servers, groups, retrieval, policy, keys.

    from serving.mcp.config import load_mcp_config
    cfg = load_mcp_config("configs/mcp.yaml", ["port=8091"])

An upstream is a stdio command (`command`, `args`, `env`) or a Streamable HTTP
`url` (`headers`, `bearer_env`); its tools are namespaced by its `name`
(`files__read_text_file`). `tools:` maps fnmatch patterns over the upstream's
own tool names to card fields (permissions, roles, tenants, risk, group), so a
server's writes can need a permission its reads do not. `groups:` moves tools
(patterns over namespaced names) into declared groups; otherwise a server is
one group.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.yaml_config import apply_overrides, read_yaml, validate_model
from serving.core.auth import AuthSettings
from serving.core.state import StateSettings
from serving.tools.config import RetrievalConfig
from serving.tools.policy import AccessPolicy

NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"


class CardFields(BaseModel):
    """Card fields set on an upstream's tools (serving/tools/cards.py); unset: the tool's own (risk from its
    MCP annotations)."""

    model_config = ConfigDict(extra="forbid")

    permissions: list[str] | None = None
    roles: list[str] | None = None
    tenants: list[str] | None = None
    environments: list[str] | None = None
    risk: Literal["read", "write", "irreversible"] | None = None
    group: str | None = None

    def update(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class UpstreamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME, description="The namespace of its tools and its default group.")
    description: str = Field(default="", description="What its group is for (find_tools and group listings).")
    command: str | None = Field(default=None, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="stdio: added to a minimal environment "
                                "(PATH, HOME); a value `$NAME` is read from the gateway's environment.")
    cwd: str | None = None
    url: str | None = Field(default=None, description="Streamable HTTP: the server's MCP endpoint.")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP: sent with every request; "
                                    "a value `$NAME` is read from the environment.")
    bearer_env: str | None = Field(default=None, description="HTTP: the environment variable holding the "
                                   "bearer token sent to this server.")
    timeout_s: float = Field(default=60.0, gt=0, description="One tools/call at most; then an MCP error.")
    connect_timeout_s: float = Field(default=30.0, gt=0)
    defaults: CardFields = Field(default_factory=CardFields, description="Card fields for every tool.")
    tools: dict[str, CardFields] = Field(default_factory=dict, description="Tool-name pattern → card fields "
                                         "(after `defaults`; later patterns win).")

    @model_validator(mode="after")
    def _one_transport(self) -> UpstreamConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"upstream {self.name!r}: give exactly one of command (stdio) or url (Streamable HTTP)")
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f"upstream {self.name!r}: url must start with http:// or https://, got {self.url!r}")
        return self

    def resolved_env(self) -> dict[str, str]:
        base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
        return {**base, **{k: _from_env(v, f"{self.name}.env.{k}") for k, v in self.env.items()}}

    def resolved_headers(self) -> dict[str, str]:
        out = {k: _from_env(v, f"{self.name}.headers.{k}") for k, v in self.headers.items()}
        if self.bearer_env:
            out["Authorization"] = "Bearer " + _from_env("$" + self.bearer_env, f"{self.name}.bearer_env")
        return out


class GroupDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)
    description: str = ""
    tools: list[str] = Field(default_factory=list, description="fnmatch patterns over namespaced tool names.")


LOOPBACK = ("127.0.0.1", "localhost", "::1")
# The Host and Origin values a loopback server accepts (the MCP SDK's DNS-rebinding check; `:*`: any port).
LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


class McpAuthSettings(AuthSettings):
    """`auth:` of configs/mcp.yaml: the chat gateway's key settings, and whether an unauthenticated server may
    listen beyond loopback."""

    allow_unauthenticated_remote: bool = Field(default=False, description="mode none on a host that is not "
                                               "loopback: refused at start unless true (then anyone who reaches "
                                               "the port is auth.local_caller).")


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    allowed_hosts: list[str] | None = Field(default=None, description="Host header values accepted (`name:*`: any "
                                            "port); null: loopback's, plus `<host>:*` when host is one address "
                                            "(not 0.0.0.0 or ::). Others: 421 (DNS-rebinding protection).")
    allowed_origins: list[str] | None = Field(default=None, description="Origin header values accepted (absent "
                                              "Origin always is); null: loopback's, plus `http(s)://<host>:*` "
                                              "when host is one address. Others: 403.")
    header_timeout_s: float = Field(default=10.0, gt=0, le=600, description="A request's headers must be complete "
                                    "this long after the connection opens (or the previous response); else 408 and "
                                    "the connection is closed (serving/gateway/server.py).")
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600, description="A request's body must be complete this "
                                  "long after the key check; else 408 (serving/core/errors.py CatchAll).")
    max_body_bytes: int = Field(default=1_000_000, ge=1024, description="Larger request bodies get 413 before any "
                                "MCP message is parsed.")
    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    groups: list[GroupDecl] = Field(default_factory=list)
    separator: str = Field(default="__", pattern=r"^[_.-]{1,3}$", description="Between server and tool name.")
    # /mcp lists these (fnmatch over namespaced names) beside find_tools and call_tool; null: the caller's
    # read-only tools, at most max_default_tools, in catalog order.
    default_tools: list[str] | None = None
    max_default_tools: int = Field(default=20, ge=0)
    refresh_s: float = Field(default=300.0, gt=0, description="Re-list every upstream this often "
                             "(and at once on notifications/tools/list_changed).")
    retry_s: tuple[float, float] = Field(default=(1.0, 60.0), description="A down upstream is retried after "
                                         "the first, doubling up to the second.")
    find_k: int = Field(default=5, ge=1, le=50, description="find_tools' results by default (at most 50).")
    find_query_chars: int = Field(default=2000, ge=16, description="find_tools reads this many characters of its "
                                  "query (the retriever reads at most 128 word pieces); the rest is ignored.")
    max_find_query_bytes: int = Field(default=65536, ge=16, description="A longer find_tools query (UTF-8) is "
                                      "refused (-32602) instead of cut.")
    clip_chars: int = Field(default=200, ge=16, description="Caller-given names (tool names) are cut to this many "
                            "characters in the call log and in error messages.")
    max_listens_per_key: int = Field(default=4, ge=1, description="subscriptions/listen streams one key may hold "
                                     "open at once; the next is refused (-32600).")
    max_listens: int = Field(default=1024, ge=1, description="subscriptions/listen streams open at once, all keys.")
    open_world_permission: str | None = Field(default="open_world", description="Permission every tool annotated "
                                              "openWorldHint: true needs (added to its card's); null: none.")
    encoder: str | None = Field(default=None, description="A trained retriever folder; null: all-MiniLM-L6-v2.")
    index_dir: str | None = Field(default="runs/mcp/index", description="The encoder's ONNX graphs are cached "
                                  "here; null: the numpy encoder (no files written, slower queries).")
    retrieval: RetrievalConfig = Field(default_factory=lambda: RetrievalConfig(rrf_k=10, w_bm25=0.5))
    policy: AccessPolicy = Field(default_factory=AccessPolicy)
    auth: McpAuthSettings = Field(default_factory=McpAuthSettings)
    log_path: str | None = Field(default="runs/mcp/calls.jsonl", description="One JSON line per call; null: none.")
    log_max_mb: float = Field(default=64.0, gt=0, description="The call log is rotated at this size "
                              "(calls.jsonl.1, .2, …).")
    log_keep: int = Field(default=4, ge=1, description="Rotated call logs kept; older ones are deleted.")
    state: StateSettings | None = Field(default=None, description="The chat gateway's shared store (`state:` of "
                                        "configs/serving.yaml: `path` for SQLite, `redis_url` for Redis) holding "
                                        "each key's per-minute window, so replicas on it agree; null: per process.")

    @model_validator(mode="after")
    def _unique(self) -> McpConfig:
        for what, names in (("upstream", [u.name for u in self.upstreams]), ("group", [g.name for g in self.groups])):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"{what} names must be unique; repeated: {dup}")
        if self.retry_s[0] > self.retry_s[1]:
            raise ValueError("retry_s: the first wait must not exceed the longest")
        if self.auth.mode == "none" and self.host not in LOOPBACK and not self.auth.allow_unauthenticated_remote:
            raise ValueError(f"host {self.host!r} is not loopback and auth.mode is none: anyone who reaches the port "
                             "could use every tool of auth.local_caller; use auth.mode: keys, or host: 127.0.0.1, or "
                             "set auth.allow_unauthenticated_remote: true to insist")
        return self

    def transport_hosts(self) -> tuple[list[str], list[str]]:
        """The Host and Origin values the server accepts (allowed_hosts, allowed_origins, or their defaults)."""
        hosts, origins = list(LOOPBACK_HOSTS), list(LOOPBACK_ORIGINS)
        if self.host not in LOOPBACK and self.host not in ("0.0.0.0", "::", ""):
            name = f"[{self.host}]" if ":" in self.host else self.host
            hosts.append(f"{name}:*")
            origins += [f"http://{name}:*", f"https://{name}:*"]
        return (hosts if self.allowed_hosts is None else self.allowed_hosts,
                origins if self.allowed_origins is None else self.allowed_origins)


def _from_env(value: str, where: str) -> str:
    if not value.startswith("$"):
        return value
    name = value[1:]
    if name not in os.environ:
        raise ValueError(f"{where}: environment variable {name} is not set (the config reads it as {value!r})")
    return os.environ[name]


def load_mcp_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> McpConfig:
    """Load (None: the defaults), apply `key=value` overrides (`port=8091`), validate (errors name the field)."""
    raw = read_yaml(path, hint="see configs/mcp.yaml") if path is not None else {}
    return validate_model(path or "<command line>", apply_overrides(raw, list(overrides)), McpConfig, list(overrides))
