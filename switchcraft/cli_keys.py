"""`switchcraft keys`: the gateway's API keys in its state store (the SQLite file or the Redis that the serving
config names), changed while the gateways run: each replica reloads them within `auth.refresh_s`.

    switchcraft keys add --id acme --tenant acme --rpm 120 --usd-per-day 5 --models gpt-4o-mini-2024-07-18
    switchcraft keys add --id ops --role admin            # prints the key once, on stdout; the store keeps its sha256
    switchcraft keys set acme --usd-per-day 2 --rpm none  # none: no limit
    switchcraft keys revoke acme                          # 401 on its next request after auth.refresh_s, everywhere
    switchcraft keys list [--json]
    switchcraft keys list --state runs/gateway | --redis redis://10.0.0.5:6379/0 | --set state.path=FOLDER

Every command first seeds the store from the config's auth.keys_file / auth.keys_env (only ids it lacks), as a
gateway does at start, so seed keys can be listed, changed and revoked before any gateway ran.
Wiring: `register(app)` adds the `keys` group.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from switchcraft.console import console, err, fail

CONFIG = typer.Option(Path("configs/serving.yaml"), "--config", "-c", help="Serving config naming the store.")
STATE = typer.Option(None, "--state", help="A state.path folder (its state.sqlite; overrides the config).")
REDIS = typer.Option(None, "--redis", help="A Redis URL (overrides the config).")
SET = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a config value, e.g. state.path=runs/gw "
                   "(repeatable).")
RPM = typer.Option(None, "--rpm", help="Limit: requests per minute (none: no limit).")
USD = typer.Option(None, "--usd-per-day", help="Limit: USD per UTC day (none: no limit).")
MODELS = typer.Option(None, "--models", help="Limit: the pool models it may use, comma-separated (none: any).")


def register(app: typer.Typer) -> None:
    keys_app = typer.Typer(help="The gateway's API keys in its state store: add, set limits, revoke, list.",
                           no_args_is_help=True)
    app.add_typer(keys_app, name="keys")
    keys_app.command("list", help="Every key: id, role, limits, created, revoked, seed or managed.")(list_cmd)
    keys_app.command("add", help="Make a key and store its hash; the key is printed once.")(add_cmd)
    keys_app.command("set", help="Change a key's limits.")(set_cmd)
    keys_app.command("revoke", help="Refuse a key from now on, on every gateway sharing the store.")(revoke_cmd)


def _open(config: Path, state_path: str | None, redis_url: str | None, overrides: list[str] | None, *,
          create: bool = False):
    """(serving config, the store it names, seeded). Fails with a clear message for an in-memory or absent store."""
    from serving.core.auth import KeyStore, configured_entries
    from serving.core.state import StateUnavailable, open_state
    from serving.gateway.config import load_serving_config

    try:
        cfg = load_serving_config(config, list(overrides or []))
    except (OSError, ValueError) as e:
        fail(str(e))
    if redis_url or state_path:
        cfg.state = cfg.state.model_copy(update={"redis_url": redis_url, "path": state_path})
    settings = cfg.state
    if settings.path is None and settings.redis_url is None:
        fail(f"{config}: state.path and state.redis_url are both null (the gateway keeps its keys in memory, out "
             "of reach); pass --state FOLDER or --redis URL, and serve with the same store")
    where = Path(settings.path or ".") / "state.sqlite"
    if settings.redis_url is None and not create and not where.exists():
        fail(f"no state store at {where}: has a gateway run with state.path={settings.path}? (`switchcraft keys add` "
             "creates it)")
    if cfg.auth.mode == "none":
        err.print(f"[bold yellow]warning:[/] {config}: auth.mode is none: the gateway asks for no key until "
                  "auth.mode is keys", highlight=False, soft_wrap=True)
    try:
        seeds = [] if cfg.auth.mode == "none" else KeyStore(configured_entries(cfg.auth)).seeds
        return cfg, open_state(settings), seeds
    except (ValueError, StateUnavailable) as e:
        fail(str(e))


def _run(store, seeds, work):
    """`work(store)` after the seeds went in, on one event loop; StateUnavailable and ValueError end the command."""
    from serving.core.managed_keys import seed
    from serving.core.state import StateUnavailable

    async def go():
        try:
            await seed(store, seeds, now=time.time())
            return await work(store)
        finally:
            await store.aclose()
    try:
        return asyncio.run(go())
    except (StateUnavailable, ValueError) as e:
        fail(str(e))


def _pool_names(cfg) -> list[str]:
    from data.errors import DataError
    from data.pool import load_pool

    try:
        return load_pool(cfg.upstream.pool).names
    except (DataError, OSError, ValueError) as e:
        fail(f"upstream.pool {cfg.upstream.pool}: {e} (the pool checks --models)")


def _limit(raw: str | None, option: str, kind) -> Any:
    """A limit option's value: None when not given, "none" → clear (returned as the string), else a number / list."""
    if raw is None or raw.strip().lower() == "none":
        return raw
    if kind is list:
        names = [m.strip() for m in raw.split(",") if m.strip()]
        if not names:
            fail(f"{option}: give pool model names, comma-separated (or none)")
        return names
    try:
        return kind(raw)
    except ValueError:
        fail(f"{option} {raw!r}: give a {'whole ' if kind is int else ''}number (or none)")


def _limits(rpm: str | None, usd: str | None, models: str | None) -> dict[str, Any]:
    """The limits given: field → value (None: remove the limit); fields not given are left out."""
    given = {"requests_per_minute": _limit(rpm, "--rpm", int), "usd_per_day": _limit(usd, "--usd-per-day", float),
             "models": _limit(models, "--models", list)}
    return {k: None if isinstance(v, str) else v for k, v in given.items() if v is not None}


def _option(message: str) -> str:
    """A store error in the command's words: limits.x → --x."""
    for field, option in (("limits.requests_per_minute", "--rpm"), ("limits.usd_per_day", "--usd-per-day"),
                          ("limits.models", "--models"), ("caller.tenant", "--tenant"), ("id", "--id")):
        if message.startswith(field + ":"):
            return option + message[len(field):]
    return message


def add_cmd(
    key_id: str = typer.Option(..., "--id", help="The key's name in logs and metrics (letters, digits, _ . -)."),
    role: str = typer.Option("caller", "--role", help="caller, or admin: may also read /metrics, spend, the console."),
    rpm: str = RPM, usd_per_day: str = USD, models: str = MODELS,
    tenant: str = typer.Option("", "--tenant", help="The caller's tenant."),
    caller_role: list[str] = typer.Option([], "--caller-role", help="A caller role, for tool permissions "
                                          "(repeatable)."),
    config: Path = CONFIG, state_path: str = STATE, redis_url: str = REDIS, overrides: list[str] = SET,
) -> None:
    """The key is printed once, alone on stdout (`KEY=$(switchcraft keys add --id x)`); only its sha256 is kept."""
    from serving.core.managed_keys import add_key

    if role not in ("caller", "admin"):
        fail(f"--role {role!r}: give caller or admin")
    limits = {k: v for k, v in _limits(rpm, usd_per_day, models).items() if v is not None}
    cfg, store, seeds = _open(config, state_path, redis_url, overrides, create=True)
    pool = _pool_names(cfg) if "models" in limits else None

    async def add(store):
        try:
            return await add_key(store, key_id, role=role, caller={"tenant": tenant, "roles": caller_role},
                                 limits=limits, pool_names=pool, now=time.time())
        except ValueError as e:
            raise ValueError(_option(str(e))) from None
    key = _run(store, seeds, add)
    err.print(f"added key {key_id} (role {role}); the key, shown once (only its hash is kept):", highlight=False,
              soft_wrap=True)
    typer.echo(key)


def set_cmd(
    key_id: str = typer.Argument(..., help="The key's id."),
    rpm: str = RPM, usd_per_day: str = USD, models: str = MODELS,
    config: Path = CONFIG, state_path: str = STATE, redis_url: str = REDIS, overrides: list[str] = SET,
) -> None:
    """Change a key's limits (only those given; none removes one)."""
    from serving.core.managed_keys import set_limits

    changes = _limits(rpm, usd_per_day, models)
    if not changes:
        fail("give a limit to change: --rpm, --usd-per-day or --models (a number, names, or none)")
    cfg, store, seeds = _open(config, state_path, redis_url, overrides)
    pool = _pool_names(cfg) if changes.get("models") else None

    async def change(store):
        try:
            return await set_limits(store, key_id, changes, pool, now=time.time())
        except ValueError as e:
            raise ValueError(_option(str(e))) from None
    entry = _run(store, seeds, change)
    console.print(f"{key_id}: {_limits_text(entry.limits)}", highlight=False, soft_wrap=True)


def revoke_cmd(
    key_id: str = typer.Argument(..., help="The key's id."),
    config: Path = CONFIG, state_path: str = STATE, redis_url: str = REDIS, overrides: list[str] = SET,
) -> None:
    """Every gateway sharing the store refuses the key (401) within auth.refresh_s; a revoked id stays taken."""
    from serving.core.managed_keys import revoke_key

    _, store, seeds = _open(config, state_path, redis_url, overrides)
    was = _run(store, seeds, lambda store: revoke_key(store, key_id, now=time.time()))
    if was.revoked:
        console.print(f"{key_id} was already revoked ({_when(was.updated)})", highlight=False, soft_wrap=True)
        return
    console.print(f"revoked {key_id}", highlight=False, soft_wrap=True)
    if was.source == "seed":
        err.print(f"note: {key_id} came from auth.keys_file / keys_env: it stays revoked, but remove it there too "
                  "(a gateway that starts while the store is down serves the seeds)", highlight=False, soft_wrap=True)


def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the keys as JSON."),
    config: Path = CONFIG, state_path: str = STATE, redis_url: str = REDIS, overrides: list[str] = SET,
) -> None:
    """Never a key, and of its hash only the first characters."""
    from serving.core.managed_keys import list_keys

    _, store, seeds = _open(config, state_path, redis_url, overrides)
    rows = _run(store, seeds, list_keys)
    data = [{"id": k.stored.id, "role": k.entry.role, "tenant": k.entry.caller.tenant,
             "limits": k.entry.limits.model_dump(), "created": k.stored.created, "updated": k.stored.updated,
             "revoked": k.stored.revoked, "source": k.stored.source, "sha256_prefix": k.hash_prefix} for k in rows]
    if as_json:
        console.print_json(json.dumps(data))
        return
    if not data:
        console.print("no keys in the state store: add one with `switchcraft keys add --id NAME`")
        return
    table = Table(title="API keys")
    for col in ("id", "role", "tenant", "rpm", "usd/day", "models", "created (UTC)", "revoked", "source", "sha256"):
        table.add_column(col)
    for d, k in zip(data, rows):
        limits = k.entry.limits
        table.add_row(d["id"], d["role"], d["tenant"] or "-", _or_none(limits.requests_per_minute),
                      _or_none(limits.usd_per_day), ", ".join(limits.models or []) or "any", _when(d["created"]),
                      f"yes ({_when(d['updated'])})" if d["revoked"] else "no", d["source"], d["sha256_prefix"] + "…")
    from rich.console import Console

    Console(width=max(console.width, 160)).print(table)  # ten columns: never cut to a pipe's 80


def _or_none(value) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _limits_text(limits) -> str:
    return (f"rpm {_or_none(limits.requests_per_minute)}, usd/day {_or_none(limits.usd_per_day)}, "
            f"models {', '.join(limits.models or []) or 'any'}")


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))
