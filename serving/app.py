"""The served app: the chat gateway (serving/gateway/), the operator's console mounted on it (serving/console/),
and its tool router over the MCP servers' tools when `tools.mcp` says so (serving/mcp/catalog.py). The gateway
routes a tool-calling request to the cheapest model predicted to get it right, then forwards it.

    switchcraft serve --config configs/serving.yaml
    app = create_app(cfg, client=RouterClient.from_dir(...), pool=load_pool(...))    # tests build it this way

Endpoints: POST /v1/route (the decision only), POST /v1/chat/completions
(OpenAI-compatible: `model: "router"` or `"router-<τ>"` routes, a pool model
name passes through; streaming passes through), POST /v1/messages and /v1/responses
(translated onto chat's path: serving/gateway/apis/, or passed through to a model
whose provider speaks them: serving/gateway/passthrough.py; their token counts and GET
/v1/models for agent clients), GET /healthz, /readyz, /metrics.
Each model is asked the way it was labelled and its answer decoded into OpenAI `tool_calls`
(serving/gateway/answers.py); the decision's strategy runs (serving/gateway/cascade.py: one
model, or an agreement cascade); a chat stream takes the single-model path. The answering model, the strategy and the cost of every
call are in the body (`model`, `switchcraft`) and the `x-switchcraft-*`
headers. Logs are one JSON object per request, without message text or keys.

Every request to /v1/* needs an API key (`Authorization: Bearer <key>`,
serving/core/auth.py) unless `auth.mode: none`; the key decides the caller
identity (which tools it may see) and its limits, and the body's caller field
may only narrow that identity. Limits are enforced in serving/core/budget.py
on counts kept in serving/core/state.py (SQLite or Redis): a request reserves
its worst-case cost before any upstream call and settles the real cost after,
streamed answers included. /metrics, /readyz details and GET /v1/admin/spend
need an admin key; /docs and /openapi.json are off unless `admin.docs`. An
unexpected exception answers 500 with `connection: close` (serving/core/errors.py).

`switchcraft serve --workers N` runs N such processes on one socket (`run_workers`, uvicorn's supervisor): each
builds its own app (`worker_app`), they share the state store and the decision log (its folder, or its PostgreSQL
database), their /metrics add up, and a router reload in one reaches every one (docs/serving.md, "Running N
replicas").

This module is the wiring, above the three folders it joins (none of them imports another's wiring):
`build_gateway` makes the parts (serving/gateway/parts.py
`Gateway`) and `create_app` registers one handler per request kind on them:
serving/gateway/chat.py (admit → plan → reserve → run → settle → respond),
route.py (the decision only) and admin.py (readiness, metrics, spend, reload).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sqlite3
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from data.pool import Pool
from serving.client import RouterClient
from serving.console import mount as mount_console
from serving.gateway import admin
from serving.core.auth import KeyStore
from serving.core.managed_keys import store_keys
from serving.gateway.batcher import RoutingBatcher
from serving.core.budget import Budgets
from serving.gateway.cascade import Cascade
from serving.gateway.apis import registry as inbound_apis, tokens
from serving.gateway.apis.models import Aliases, models_endpoint
from serving.gateway.chat import handler
from serving.gateway.config import ServingConfig, ToolRoutingSettings
from serving.core.decision_log import open_decision_log
from serving.core.log_queue import LogQueue
from serving.core.errors import ROUTE_ENDPOINTS, CatchAll, route_errors
from serving.gateway.explore import Explorer
from serving.core.metrics import GatewayMetrics
from serving.gateway.overhead import Overhead
from serving.gateway.parts import Gateway, ToolSelector
from serving.core.record import Observer
from serving.gateway.reload import RouterSlot, client_from
from serving.gateway.requests import check_strategy
from serving.gateway.route import route_only
from serving.core.state import StateStore, open_state
from serving.gateway.tools import GatewayTools
from serving.gateway.upstream import Upstreams

log = logging.getLogger("switchcraft.gateway")

IN_MEMORY = ("state.path is null: limits and spend are kept in memory and forgotten when the gateway stops; "
             "set state.path (SQLite) or state.redis_url (several processes) to keep them")
UNAUTHENTICATED = ("UNAUTHENTICATED gateway (auth.mode: none): no API key is asked for; anyone who can reach "
                   "{where} spends the pool's provider keys. For local use only.")


def build_gateway(cfg: ServingConfig, *, client: RouterClient, pool: Pool, tool_selector: ToolSelector | None = None,
                  tools: GatewayTools | None = None, keys: KeyStore | None = None, state: StateStore | None = None,
                  observers: list[Observer] | None = None) -> Gateway:
    """The gateway's parts, as `create_app` takes them (no server, no lifespan: a test may call handlers on them)."""
    if tools is None and cfg.tools is not None:
        tools = tools_of(cfg.tools)
    metrics = GatewayMetrics()
    state = state or open_state(cfg.state)
    budgets = Budgets.from_settings(state, metrics, cfg.state)
    observers = list(observers or [])
    if cfg.otel.endpoint:  # one span per request, a child per upstream call (serving/gateway/tracing.py)
        from serving.gateway.tracing import Tracing

        observers.append(Tracing.from_settings(cfg.otel, breaker_state=lambda m: upstreams.breakers.of(m).current()))
    upstreams = Upstreams(pool, metrics, timeout_s=cfg.upstream.timeout_s,
                          max_connections=cfg.upstream.max_connections, breaker=cfg.upstream.breaker,
                          key_share=cfg.upstream.key_share, key_wait_s=cfg.upstream.key_wait_s,
                          default_output_tokens=cfg.state.default_output_tokens)
    cascade = Cascade(upstreams, pool, metrics, max_attempts=cfg.upstream.max_attempts,
                      hedge_after_s=cfg.upstream.hedge_after_s)
    forced = None if cfg.router.cascade is None else check_strategy(cfg.router.cascade.strategy(), pool.names,
                                                                    "router.cascade")
    keys = keys or store_keys(cfg.auth, pool.names, state)  # the store's keys, seeded from cfg.auth
    slot = RouterSlot(client, lambda c, runner: RoutingBatcher(c, metrics, max_batch_size=cfg.router.max_batch_size,
                                                               delay_s=cfg.router.batch_delay_ms / 1e3,
                                                               max_queue=cfg.router.max_queue,
                                                               length_ratio=cfg.router.batch_length_ratio,
                                                               executor=runner),
                      pool.names, metrics, load=lambda path: client_from(cfg.router, path), default_dir=cfg.router.dir)
    if cfg.log.path or cfg.log.url:  # every served request and every answer, for `switchcraft learn`
        replica = f"{cfg.replica or socket.gethostname()}:{os.getpid()}"  # who served each logged request
        try:
            observers.insert(0, open_decision_log(cfg.log, metrics, replica=replica, shared=cfg.workers > 1))
        except ConnectionError as e:  # log.url: the server cannot be reached, or refused this user
            raise ValueError(f"log.url: {e}; start the server, or check the URL and the user's rights") from None
        except (OSError, sqlite3.Error) as e:
            raise ValueError(f"log.path {cfg.log.path}: the decision log cannot be written there "
                             f"({getattr(e, 'strerror', None) or e}); give a folder this process may write, or "
                             "log.path=null for no decision log") from None
    if cfg.explore.rate > 0:  # after answering, the pool models the strategy did not call (own budget)
        decision_log = next((o for o in observers if isinstance(o, LogQueue)), None)
        observers.insert(1 if decision_log else 0, Explorer(cfg.explore, pool, cascade, budgets, decision_log, metrics,
                                                            state_settings=cfg.state))
    return Gateway(cfg, pool, metrics, keys, state, budgets, upstreams, cascade, slot, tools, tool_selector, forced,
                   observers)


def tools_of(settings: ToolRoutingSettings) -> GatewayTools:
    """The tool router `tools:` names: over the tools its MCP servers list now (`tools.mcp`, serving/mcp/catalog.py),
    else over a catalog file."""
    if settings.mcp is None:
        return GatewayTools.from_settings(settings)
    from serving.mcp.catalog import mcp_tool_router
    from serving.tools.config import load_tools_config

    return GatewayTools(mcp_tool_router(settings.mcp, load_tools_config(settings.config).groups, settings.top_k),
                        max_tools=settings.max_tools, rejected=settings.rejected_calls)


def create_app(cfg: ServingConfig, *, client: RouterClient, pool: Pool,
               tool_selector: ToolSelector | None = None, tools: GatewayTools | None = None,
               keys: KeyStore | None = None, state: StateStore | None = None,
               observers: list[Observer] | None = None) -> FastAPI:
    """`tools`: a tool router over a catalog; when None it is built from `cfg.tools` (if configured).
    `keys`: the API keys; when None they are read as `cfg.auth` says (ValueError when none are configured).
    `state`: where limits and spend live; when None it is opened as `cfg.state` says (closed with the app).
    `observers`: more watchers of every served chat request (serving/core/record.py), after those `cfg` asks for."""
    own_state = state is None
    gw = build_gateway(cfg, client=client, pool=pool, tool_selector=tool_selector, tools=tools, keys=keys,
                       state=state, observers=observers)

    docs = cfg.admin.docs  # off by default: the API's shape is no business of an anonymous caller
    # redirect_slashes off: Starlette's 307 for `/v1/chat/completions/` builds its Location from the Host header
    app = FastAPI(title="switchcraft gateway", lifespan=_lifespan(gw, own_state), redirect_slashes=False,
                  docs_url="/docs" if docs else None,
                  redoc_url="/redoc" if docs else None, openapi_url="/openapi.json" if docs else None)
    app.state.gateway = gw
    app.state.metrics, app.state.tools, app.state.keys = gw.metrics, gw.tools, gw.keys  # the router: gw.slot
    app.state.upstreams, app.state.budgets, app.state.slot, app.state.store = gw.upstreams, gw.budgets, gw.slot, gw.state
    app.state.observers = gw.observers
    shapes = ({api.path: api.error_body for api in inbound_apis.apis()}
              | {api.count_path: api.error_body for api in inbound_apis.apis() if api.count_path})
    endpoints = ROUTE_ENDPOINTS | {api.path: api.endpoint for api in inbound_apis.apis()}  # the metrics' labels
    app.add_exception_handler(StarletteHTTPException, route_errors(shapes, endpoints))  # 404/405 in the API's shape
    app.add_middleware(CatchAll, metrics=gw.metrics, log=log, body_timeout_s=cfg.body_timeout_s, shapes=shapes,
                       endpoints=endpoints)
    app.add_middleware(Overhead, metrics=gw.metrics, endpoints=endpoints)  # outermost: x-switchcraft-overhead-ms
    _routes(app, gw)
    mount_console(app, gw)  # /console: the operator's pages (serving/console/), admin keys only
    return app


def _routes(app: FastAPI, gw: Gateway) -> None:
    """One route per endpoint, each calling its request kind's handler with the parts."""

    aliases = Aliases.checked(gw.cfg.aliases, gw.pool.names)  # agent clients' own model names (apis/models.py)
    for api in inbound_apis.apis():  # one path (chat.py serve); every API but chat translates (apis/registry.py)
        served = aliases.applied(api) if api.aliased else api
        app.add_api_route(api.path, handler(gw, served), methods=["POST"], name=api.endpoint)
        if api.count_path:  # POST /v1/messages/count_tokens, /v1/responses/input_tokens
            app.add_api_route(api.count_path, tokens.counter(gw, api), methods=["POST"], name=f"{api.endpoint}_tokens")
    app.add_api_route("/v1/models", models_endpoint(gw), methods=["GET"], name="models")

    @app.post("/v1/route")
    async def route(request: Request) -> Response:
        return await route_only(gw, request)

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        return await admin.readyz(gw, request)

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        return await admin.prometheus(gw, request)

    @app.post("/v1/admin/reload")
    async def admin_reload(request: Request) -> Response:
        return await admin.reload(gw, request)

    @app.post("/v1/admin/rollback")
    async def admin_rollback(request: Request) -> Response:
        return await admin.rollback(gw, request)

    @app.get("/v1/admin/spend")
    async def admin_spend(request: Request, key: str | None = None, day: str | None = None) -> Response:
        return await admin.spend(gw, request, key, day)


def _lifespan(gw: Gateway, own_state: bool):
    """Start: the warnings an operator must see. Stop: observers flushed, then the router, upstreams and state
    (the state only when create_app opened it)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        cfg = gw.cfg
        await gw.keys.start()  # the configured keys seed the state store; its keys are loaded
        if gw.keys.mode == "none":
            log.warning(json.dumps({"event": "auth", "mode": "none",
                                    "warning": UNAUTHENTICATED.format(where=f"{cfg.host}:{cfg.port}")}))
        if not gw.state.durable:
            log.warning(json.dumps({"event": "state", "store": "memory", "warning": IN_MEMORY}))
        hangup = _on_sighup(lambda: gw.slot.reload())
        follower = None
        if gw.slot.shared is not None:  # one of several workers: what the others reloaded, before serving and after
            await gw.slot.catch_up()
            follower = asyncio.get_running_loop().create_task(gw.slot.follow())
        yield
        if follower is not None:
            follower.cancel()
        if hangup:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        for o in reversed(gw.observers):  # flush what they hold (explorations in flight, then log records, spans)
            if hasattr(o, "aclose"):
                await o.aclose()
        await gw.slot.aclose()
        await gw.upstreams.aclose()
        await gw.budgets.aclose()  # charges still being written land first (bounded)
        if own_state:
            await gw.state.aclose()
        gw.metrics.close()

    return lifespan


def _on_sighup(reload) -> bool:
    """SIGHUP reloads router.dir (only where the loop runs in the main thread, as under `switchcraft serve`)."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(reload()))
    except (ValueError, RuntimeError, NotImplementedError):
        return False
    return True


def load_served(config: Path, overrides: list[str]) -> tuple[ServingConfig, FastAPI, RouterClient]:
    """The serving config with its overrides, the router it names and the app over them, as `switchcraft serve`
    runs them. ValueError / FileNotFoundError / DataError / StateUnavailable name what is wrong."""
    from data.pool import load_pool
    from serving.gateway.config import load_serving_config

    cfg = load_serving_config(config, overrides)
    client = client_from(cfg.router, cfg.router.dir)  # the same settings a reload (SIGHUP) loads with
    return cfg, create_app(cfg, client=client, pool=load_pool(cfg.upstream.pool)), client


def bind(cfg: ServingConfig) -> socket.socket:
    """The listening socket on cfg.host:cfg.port, bound before anything says the gateway is up: a port in use
    fails here (ValueError), not after a banner."""
    family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((cfg.host, cfg.port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror or e} (another process holds the "
                         "port? give another: --port N or port=N)") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_served(cfg: ServingConfig, app: FastAPI, client: RouterClient, sock: socket.socket | None = None) -> None:
    """Serve until stopped: every log line one JSON object on stderr; headers and bodies have deadlines
    (header_timeout_s, body_timeout_s), so a slow client cannot hold a connection."""
    import uvicorn

    from serving.core.errors import configure_json_logging
    from serving.gateway.server import uvicorn_config

    configure_json_logging(cfg.log_level)  # uvicorn's and httpx's lines too
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    uvicorn.Server(uvicorn_config(app, cfg)).run(sockets=[sock or bind(cfg)])


WORKER_APP = "serving.app:worker_app"  # what each worker process of `switchcraft serve --workers N` calls
WORKER_ENV = "SWITCHCRAFT_SERVE_WORKER"  # {"config", "overrides", "run"}: what it builds, and the run's folder


def serve_from(config: Path, overrides: list[str]) -> None:
    """Serve as `switchcraft serve --config CONFIG OVERRIDES…` does (without its banner): one process, or
    cfg.workers of them."""
    from serving.gateway.config import load_serving_config

    cfg = load_serving_config(config, overrides)
    if cfg.workers > 1:
        run_workers(config, overrides, cfg, bind(cfg))
    else:
        run_served(*load_served(config, overrides))


def run_workers(config: Path, overrides: list[str], cfg: ServingConfig, sock: socket.socket) -> None:
    """cfg.workers processes serving `sock`, under uvicorn's own supervisor (a worker that dies is replaced; SIGHUP
    replaces each in turn; SIGTERM or SIGINT stops them all). Each builds the app from `config` and `overrides`
    (`worker_app`) and loads the router itself. They share the state store and the decision log (a file each in its
    folder, or one PostgreSQL database); their /metrics add up (prometheus_client's multiprocess mode, in a folder of this run's own) and a
    router reload in one reaches them all (serving/gateway/reload.py SharedRouter, in the same folder).
    ValueError when a worker could not start (its error is logged)."""
    import shutil
    import tempfile

    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    from serving.core.errors import configure_json_logging
    from serving.gateway.server import uvicorn_config

    configure_json_logging(cfg.log_level)
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    run = Path(tempfile.mkdtemp(prefix="switchcraft-workers-"))
    (run / "metrics").mkdir()
    before = {k: os.environ.get(k) for k in (WORKER_ENV, "PROMETHEUS_MULTIPROC_DIR")}
    os.environ[WORKER_ENV] = json.dumps({"config": str(config), "overrides": list(overrides), "run": str(run)})
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(run / "metrics")  # read when each worker imports prometheus_client
    try:
        supervisor = Multiprocess(uvicorn_config(WORKER_APP, cfg), sockets=[sock])
        supervisor.run()
    finally:
        for k, v in before.items():  # this process as it was (a test runs the CLI in its own process)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(run, ignore_errors=True)
    if any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes):
        raise ValueError("a gateway worker could not start (its error is logged above); nothing is served")


def worker_app() -> FastAPI:
    """One worker's app (uvicorn calls this in each worker process of `run_workers`): built as a lone gateway's
    is, from the config and overrides the supervisor was given, with the shared router record. A config, router
    or store that cannot be served is logged and the worker exits with uvicorn's startup-failure code, so the
    supervisor stops rather than restarting it."""
    import sys

    from uvicorn.config import STARTUP_FAILURE

    from data.errors import DataError
    from serving.core.errors import configure_json_logging
    from serving.core.state import StateUnavailable
    from serving.gateway.reload import SharedRouter
    from serving.gateway.server import WorkerH11Protocol

    spec = json.loads(os.environ[WORKER_ENV])
    configure_json_logging("info")
    try:
        cfg, app, _ = load_served(Path(spec["config"]), spec["overrides"])
    except (FileNotFoundError, DataError, ValueError, StateUnavailable) as e:
        log.error(json.dumps({"event": "worker_failed", "pid": os.getpid(), "error": str(e)}))
        sys.exit(STARTUP_FAILURE)
    configure_json_logging(cfg.log_level)
    WorkerH11Protocol.for_worker(cfg.header_timeout_s, app.state.metrics)
    app.state.gateway.slot.shared = SharedRouter(Path(spec["run"]) / "router.json")
    return app
