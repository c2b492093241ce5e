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
from serving.gateway.auth import AuthSettings
from serving.gateway.config import StateSettings
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


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
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
    encoder: str | None = Field(default=None, description="A trained retriever folder; null: all-MiniLM-L6-v2.")
    index_dir: str | None = Field(default="runs/mcp/index", description="The encoder's ONNX graphs are cached "
                                  "here; null: the numpy encoder (no files written, slower queries).")
    retrieval: RetrievalConfig = Field(default_factory=lambda: RetrievalConfig(rrf_k=10, w_bm25=0.5))
    policy: AccessPolicy = Field(default_factory=AccessPolicy)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    log_path: str | None = Field(default="runs/mcp/calls.jsonl", description="One JSON line per call; null: none.")
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
        return self


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
