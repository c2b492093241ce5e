"""The gateway's configuration (`configs/serving.yaml`), typed and validated.

    from serving.gateway.config import load_serving_config
    cfg = load_serving_config("configs/serving.yaml", ["backend=triton-grpc", "triton_url=127.0.0.1:8001"])

Every field has a default; `key=value` overrides (dotted keys for sections,
values read as YAML) change them. Bad values raise `DataError` naming the file
and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.yaml_config import apply_overrides, read_yaml, validate_model
from serving.core.auth import AuthSettings
from serving.core.state import StateSettings
from training.policy import Strategy

DEFAULT_CONFIG = Path("configs/serving.yaml")
# Claude Code's default and small/fast models (claude-*) and Codex CLI's default (gpt-*, codex-*): routed.
AGENT_ALIASES = {"claude-*": "router", "gpt-*": "router", "codex-*": "router"}


class CascadeSettings(BaseModel):
    """A strategy the gateway runs instead of the decision's own (operators, tests): `{first: [a, b], escalate: [d]}`."""

    model_config = ConfigDict(extra="forbid")

    kind: str | None = Field(default=None, description="A registered strategy kind (training.policy.kinds: single, "
                             "agree, …); without one: single for one first model, agree for two.")
    first: list[str] = Field(min_length=1, description="Called first, together (single: one; agree: two).")
    tie_breaker: str | None = Field(default=None, description="Called when the first two disagree.")
    escalate: list[str] = Field(default_factory=list, description="On disagreement, in order (a single: its fallbacks).")
    resolve: dict[str, str] = Field(default_factory=dict, description="Disagreement kind (first_declines, second_declines, "
                                    "count, functions, arguments) → first | second | escalate: resolved without asking more.")

    @model_validator(mode="after")
    def _a_strategy(self) -> CascadeSettings:
        self.strategy()  # the same rules as training.policy.Strategy (ValueError names what is wrong)
        return self

    def strategy(self) -> Strategy:
        return Strategy(tuple(self.first), self.tie_breaker, tuple(self.escalate), tuple(self.resolve.items()), self.kind)


class RouterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dir: str = Field(default="runs/default/router_onnx", description="Exported router (switchcraft export) or a model repository.")
    backend: Literal["ort", "triton-http", "triton-grpc"] = "ort"
    triton_url: str | None = Field(default=None, description="host:port of Triton (HTTP or gRPC port per backend).")
    int8: bool = Field(default=False, description="In-process: serve router.int8.onnx.")
    threads: int | None = Field(default=None, ge=1, description="ONNX Runtime intra-op threads (default: all cores).")
    spin: bool = Field(default=False, description="Let ORT workers busy-wait between runs (a dedicated CPU only).")
    timeout_s: float = Field(default=2.0, gt=0, description="Per routing call to Triton.")
    max_batch_size: int = Field(default=32, ge=1, description="Routing calls merged into one inference call at most "
                                "(the gateway's micro-batcher; 1: every request alone).")
    batch_delay_ms: float = Field(default=2.0, ge=0, le=1000, description="How long the first routing call of a batch "
                                  "waits for others to join (0: only what is already queued; more waits only while "
                                  "the backend is idle).")
    batch_length_ratio: float | None = Field(default=1.25, ge=1, description="A batch is run as one inference call "
                                             "per group of similar packed length: a group ends where a request is "
                                             "longer than this × the group's shortest (padding is what a CPU pays "
                                             "for); null: one call however mixed.")
    max_queue: int = Field(default=64, ge=1, description="Routing calls waiting or in flight at most; beyond it a "
                           "request gets 429 router_busy with Retry-After (backpressure, never a silent timeout).")
    pad_multiple: int = Field(default=1, ge=1, description="Pad lengths to a multiple (helps Triton's ONNX batcher).")
    rule: Literal["threshold", "lambda"] | None = Field(default=None, description="Policy rule (default: router.json's, else threshold).")
    lam: float | None = Field(default=None, gt=0, description="λ of the lambda rule (switchcraft evaluate prints a calibrated one).")
    novelty: bool = Field(default=True, description="Send a request unlike the router's training requests (router.json "
                          "`novelty`, training/novelty.py) to the pool's safe model, its most accurate single model; "
                          "false: route it like any other.")
    cascade: CascadeSettings | None = Field(default=None, description="Run this strategy instead of the decision's "
                                            "(models checked against the pool when the gateway starts).")

    @model_validator(mode="after")
    def _triton_needs_url(self) -> RouterSettings:
        if self.backend != "ort" and not self.triton_url:
            raise ValueError(f"backend {self.backend} needs router.triton_url (host:port)")
        return self


class BreakerSettings(BaseModel):
    """A circuit breaker per upstream endpoint (base_url): consecutive failures open it, a probe closes it."""

    model_config = ConfigDict(extra="forbid")

    failures: int = Field(default=5, ge=1, description="Consecutive failures (connection, timeout, 5xx) that open it.")
    open_s: float = Field(default=5.0, gt=0, description="How long it stays open before half-open probes.")
    probes: int = Field(default=1, ge=1, description="Requests let through at once while half-open.")


class UpstreamSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: str = Field(default="configs/pool.yaml", description="Pool models: base_url, api_key_env, timeout_s.")
    timeout_s: float | None = Field(default=None, gt=0, description="Overrides every pool model's timeout_s.")
    max_attempts: int = Field(default=3, ge=1, description="The chosen model plus this many minus one fallbacks.")
    max_connections: int = Field(default=64, ge=1)
    key_share: float = Field(default=0.5, gt=0, le=1, description="Upstream calls one API key may have in flight "
                             "at once, as a share of max_connections (at least one): a key's slow requests never "
                             "hold the whole pool (serving/gateway/fairshare.py).")
    key_wait_s: float = Field(default=5.0, ge=0, le=600, description="How long a call beyond its key's share waits "
                              "for one of the key's own calls to end; then 429 key_upstream_busy with Retry-After.")
    breaker: BreakerSettings = Field(default_factory=lambda: BreakerSettings())
    hedge_after_s: float | None = Field(default=None, gt=0, description="Single strategies: when the first model has "
                                        "not answered after this long, also ask the next; the slower call is abandoned "
                                        "and still billed (up to 2x the cost of a request that hedges).")


class ToolRoutingSettings(BaseModel):
    """Tool routing in the gateway (serving/tools): absent → off, the caller's tools pass through as before."""

    model_config = ConfigDict(extra="forbid")

    config: str = Field(default="configs/tools.yaml", description="The tool-routing config (catalog, policy, groups).")
    catalog: list[str] | None = Field(default=None, description="Overrides the tools config's catalog files.")
    top_k: int | None = Field(default=None, ge=1, description="Overrides retrieval.top_k of the tools config.")
    index_dir: str | None = Field(default=None, description="Overrides index_dir of the tools config.")
    mcp: str | None = Field(default=None, description="An MCP gateway config (configs/mcp.yaml): the catalog is "
                            "its upstream servers' tools, listed at start, with its policy and retrieval "
                            "(serving/mcp/catalog.py); the tools config then gives only `groups`.")
    max_tools: int = Field(default=64, ge=1, description="Tools an agent session is shown at most: its tools grow "
                           "turn by turn in a stable order, and past this the ones unused longest (neither routed "
                           "to nor called) leave (serving/gateway/sessions.py).")
    rejected_calls: Literal["drop", "refuse", "pass"] = Field(default="drop", description="A model's call to a tool "
                                                              "the caller was not shown: drop it from the answer, "
                                                              "refuse (withhold every call of that answer), or "
                                                              "pass it on; a message left empty says why in its "
                                                              "text. Always listed in "
                                                              "switchcraft.tool_routing.rejected_calls.")


class OtelSettings(BaseModel):
    """`otel:` OpenTelemetry traces (serving/gateway/tracing.py): one span per request, a child per upstream call."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = Field(default=None, description="OTLP/HTTP traces endpoint, e.g. "
                                 "http://collector:4318/v1/traces; null: no traces.")
    service_name: str = Field(default="switchcraft-gateway", min_length=1)
    headers: dict[str, str] = Field(default_factory=dict, description="Sent with every export (e.g. an auth header).")


class DecisionLogSettings(BaseModel):
    """`log:` the decision log (serving/core/decision_log.py): what `switchcraft learn` learns from. SQLite files
    under `path` (one machine), or one PostgreSQL database at `url` that every gateway of a fleet writes."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(default=None, description="Folder of the decision log (SQLite files, rotated); "
                             "null (and no url): no decision log.")
    url: str | None = Field(default=None, description="A PostgreSQL decision log, postgresql://user@host:port/db, "
                            "shared by every gateway (workers and replicas); instead of path. Give the password by "
                            "PGPASSWORD or ~/.pgpass rather than in the URL.")
    requests: bool = Field(default=False, description="Also keep the request's messages and tools (retraining the "
                           "router needs them; some operators may not allow keeping them).")
    max_mb: float = Field(default=256.0, gt=0, description="A log file is rotated once it is this large (path).")
    keep: int = Field(default=4, ge=1, description="Rotated files kept (the oldest is deleted; path).")
    keep_days: float | None = Field(default=30.0, gt=0, description="With url: requests older than this many days "
                                    "(and their answers and summary hours) are deleted, hourly; null: kept.")
    queue: int = Field(default=10_000, ge=1, description="Records waiting to be written at most; beyond, they are "
                       "dropped and counted (the log never blocks a response).")

    @model_validator(mode="after")
    def _one_log(self) -> DecisionLogSettings:
        if self.url is not None and self.path is not None:
            raise ValueError("log: give path (SQLite files) or url (PostgreSQL), not both")
        if self.url is not None and not self.url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"log.url {self.url.split('@')[-1]!r}: give postgresql://user@host:port/database")
        return self


class ExploreSettings(BaseModel):
    """`explore:` after answering, also ask the pool models the strategy did not call, on a sampled share of
    requests, within the operator's own budget (serving/gateway/explore.py)."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(default=0.0, ge=0, le=1, description="Share of answered requests explored (0: off).")
    usd_per_day: float = Field(default=1.0, gt=0, description="The operator's exploration budget per UTC day.")
    models: list[str] | Literal["all"] = Field(default="all", description="Pool models explored.")
    min_answers: int = Field(default=200, ge=0, description="The logged answers each explored model should reach "
                             "(a target the gateway reports: switchcraft_explore_models_below_target); it never "
                             "raises the rate.")
    concurrency: int = Field(default=4, ge=1, description="Explorations running at once at most (beyond: skipped "
                             "and counted).")


class AdminSettings(BaseModel):
    """What the public port shows operators (docs/serving.md, section 4: the endpoint table)."""

    model_config = ConfigDict(extra="forbid")

    docs: bool = Field(default=False, description="Serve /docs, /redoc and /openapi.json (off: they are 404).")


class ConsoleSettings(BaseModel):
    """`console:` the operator's console at /console (serving/console/, docs/console.md): its login's bounds."""

    model_config = ConfigDict(extra="forbid")

    max_login_bytes: int = Field(default=4_096, ge=256, le=1_000_000, description="A console form's body at most "
                                 "(the login's, the Keys view's; a key is under 100 bytes); larger gets 413, and a "
                                 "body without a length is read no further than this.")
    session_max_age_s: int = Field(default=28_800, ge=60, le=30 * 86_400, description="A console session cookie's "
                                   "lifetime from its login.")
    login_failures_per_address: int = Field(default=10, ge=1, description="Failed logins one client address may make "
                                            "in a minute; beyond, its logins get 429 with Retry-After.")
    login_failures_total: int = Field(default=100, ge=1, description="Failed logins from all addresses in a minute; "
                                      "beyond, every login gets 429 with Retry-After.")
    origins: list[str] = Field(default_factory=list, description="Origins besides the gateway's own (scheme://host "
                               "of the request) whose pages may post the login and logout forms, e.g. "
                               "https://ops.example.com behind a proxy that rewrites Host.")

    @model_validator(mode="after")
    def _origins_are_origins(self) -> ConsoleSettings:
        for i, origin in enumerate(self.origins):
            scheme, _, host = origin.partition("://")
            if scheme not in ("http", "https") or not host or any(c in host for c in "/?#@ \t"):
                raise ValueError(f"console.origins[{i}]: {origin!r} is not an origin; write scheme://host[:port], "
                                 "e.g. https://ops.example.com (no path)")
        return self


class ServingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=64, description="Gateway processes serving host:port (uvicorn's "
                         "workers, each with the router loaded); above 1 they share the state store and each "
                         "writes its own decision-log file, so state.path or state.redis_url must be set.")
    replica: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="This gateway's "
                                "name in the decision log (`replica`: name:pid of the process that served a "
                                "request); null: the host's name.")
    router: RouterSettings = Field(default_factory=RouterSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    max_body_bytes: int = Field(default=2_000_000, ge=1024, description="Larger request bodies get 413.")
    max_json_depth: int = Field(default=100, ge=8, le=512, description="Deeper-nested request bodies get 400.")
    # Slow clients (slow loris; serving/gateway/server.py, errors.py): a worker is never held by a client's pace.
    header_timeout_s: float = Field(default=10.0, gt=0, le=600, description="A request's headers must be complete "
                                    "this long after its first byte (or the connection's start); else the "
                                    "connection is closed (408).")
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600, description="A request's body must be complete this "
                                  "long after its headers; else 408 with connection: close.")
    max_messages: int = Field(default=512, ge=1)
    # What a caller may make large (serving/gateway/body.py Bounds): each is a 400 naming the field and limit.
    max_tools: int = Field(default=512, ge=1, description="Tools in one request at most.")
    max_enum_values: int = Field(default=1_000, ge=1, description="Values of one `enum` in a tool's (or a "
                                 "response format's) JSON Schema at most.")
    max_schema_depth: int = Field(default=32, ge=1, le=64, description="Subschemas nested below a tool's "
                                  "parameters (properties, items, anyOf, …) at most.")
    max_metadata_bytes: int = Field(default=16_384, ge=2, description="The body's `metadata` object, as JSON, at "
                                    "most this many bytes.")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_bodies: bool = Field(default=False, description="Never on in production: logs message text.")
    tools: ToolRoutingSettings | None = Field(default=None, description="Route tools from a catalog first (off: null).")
    auth: AuthSettings = Field(default_factory=AuthSettings, description="Inbound API keys (on by default).")
    state: StateSettings = Field(default_factory=StateSettings, description="Limits and the spend ledger.")
    admin: AdminSettings = Field(default_factory=AdminSettings, description="Operator surfaces.")
    otel: OtelSettings = Field(default_factory=OtelSettings, description="OpenTelemetry traces (off by default).")
    log: DecisionLogSettings = Field(default_factory=DecisionLogSettings, description="The decision log.")
    explore: ExploreSettings = Field(default_factory=ExploreSettings, description="Exploration (off by default).")
    console: ConsoleSettings = Field(default_factory=ConsoleSettings, description="The operator's console.")
    aliases: dict[str, str] = Field(default_factory=lambda: dict(AGENT_ALIASES), description="Model name or glob → "
                                    "'router', 'router-<τ>' or a pool model, on /v1/messages and /v1/responses: "
                                    "what an agent client asks for by its own default names (first match wins; a "
                                    "pool model's name is never aliased; {} for none). serving/gateway/apis/models.py")

    @model_validator(mode="after")
    def _workers_share_state(self) -> ServingConfig:
        if self.workers > 1 and not self.state.path and not self.state.redis_url:
            raise ValueError(f"workers: {self.workers} workers with state.path and state.redis_url null would each "
                             "keep their own limits and spend in memory; set state.path (a SQLite folder the "
                             "workers share) or state.redis_url, or serve with --workers 1")
        return self


def load_serving_config(path: str | Path = DEFAULT_CONFIG, overrides: list[str] | None = None) -> ServingConfig:
    raw = read_yaml(path, hint="run from the repository root or pass --config")
    return validate_model(path, apply_overrides(raw, overrides or []), ServingConfig, overrides)
