"""API keys kept in the state store, where every gateway replica reads them; an operator adds, changes and revokes
them while the gateways run (`switchcraft keys`, the console's Keys view).

    keys = store_keys(cfg.auth, pool.names, state)    # the configured keys as the seed, and a KeyFeed on the store
    await keys.start()        # at start: each seed put in the store if its id is absent, then every key read
    await keys.refresh()      # each request: the keys reloaded when the store's key version moved (every refresh_s)
    key = await add_key(store, "acme", caller={"tenant": "acme"}, limits={"usd_per_day": 5.0}, now=time.time())
    await set_limits(store, "acme", {"usd_per_day": 2.0, "models": None}, pool_names, now=...)   # None: no limit
    await revoke_key(store, "acme", now=...)
    rows = await list_keys(store)                                       # [ManagedKey], by id

The key file (`auth.keys_file`) and the environment (`auth.keys_env`) are a seed: at start each of their entries
is put into the store only where its id is absent, so a seed key revoked or changed in the store stays so across
restarts (the file's differing entry is reported, never applied). The store keeps an entry's sha256, never a key;
a key made here is returned once, to be shown once.

A store outage: the gateway keeps serving with the keys it loaded last, revoked ones still refused, and says so
in one log line (and one when the store is back); at most one request per `auth.refresh_s` waits on the store
for the check, none while it is down.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from serving.core.auth import KeyEntry, KeyStore, first_error, hash_key, new_key
from serving.core.state_base import StateStore, StateUnavailable, StoredKey

log = logging.getLogger("switchcraft.gateway")
HASH_SHOWN = 8  # hex characters of a key's sha256 a listing shows


def store_keys(settings, pool_names: list[str] | None, store: StateStore,
               environ: dict[str, str] | None = None) -> KeyStore:
    """A door's keys over `store` (`settings`: AuthSettings): the configured entries seed it, and the keys are the
    store's from `start()` on. ValueError as KeyStore.from_settings, which it calls."""
    keys = KeyStore.from_settings(settings, pool_names, environ, durable_store=store.durable)
    if keys.mode == "keys":
        keys.feed = KeyFeed(keys, store, refresh_s=settings.refresh_s, pool_names=pool_names)
    return keys


def stored_entry(entry: KeyEntry) -> str:
    """The entry as the store keeps it: JSON with its sha256, without the key itself."""
    data = entry.model_dump(mode="json", exclude={"key"})
    data["sha256"] = entry.digest()
    return json.dumps(data, sort_keys=True)


def entry_of(stored: StoredKey) -> KeyEntry:
    """The entry of a stored key; ValueError naming the key and the field when the store holds something else."""
    try:
        return KeyEntry.model_validate_json(stored.entry)
    except ValidationError as e:
        where, message = first_error(e)
        raise ValueError(f"state store: key {stored.id!r}: {where + ': ' if where else ''}{message}") from None


def checked_entry(data: dict[str, Any], pool_names: list[str] | None) -> KeyEntry:
    """A new or changed entry, validated; ValueError naming the field (and the pool for an unknown model)."""
    try:
        entry = KeyEntry.model_validate(data)
    except ValidationError as e:
        where, message = first_error(e)
        raise ValueError(f"{where + ': ' if where else ''}{message}") from None
    unknown = [m for m in entry.limits.models or [] if pool_names is not None and m not in pool_names]
    if unknown:
        raise ValueError(f"limits.models: not in the pool: {', '.join(unknown)}; the pool: "
                         f"{', '.join(pool_names or [])}")
    return entry


@dataclass(frozen=True)
class ManagedKey:
    """A stored key as a listing shows it."""

    stored: StoredKey
    entry: KeyEntry

    @property
    def hash_prefix(self) -> str:
        return self.entry.digest()[:HASH_SHOWN]


async def list_keys(store: StateStore) -> list[ManagedKey]:
    _, stored = await store.keys_read()
    return [ManagedKey(s, entry_of(s)) for s in stored]


async def find_key(store: StateStore, key_id: str) -> StoredKey:
    _, stored = await store.keys_read()
    for s in stored:
        if s.id == key_id:
            return s
    raise ValueError(f"no key {key_id!r} in the state store; its keys: {', '.join(s.id for s in stored) or 'none'}")


async def add_key(store: StateStore, key_id: str, *, role: str = "caller", caller: dict[str, Any] | None = None,
                  limits: dict[str, Any] | None = None, pool_names: list[str] | None = None, now: float) -> str:
    """A new 256-bit key stored under `key_id` (its hash only); the key is returned, once. ValueError: a taken id,
    a bad field, a model outside the pool."""
    key = new_key()
    entry = checked_entry({"id": key_id, "sha256": hash_key(key), "caller": caller or {}, "limits": limits or {},
                           "role": role}, pool_names)
    if not await store.key_create(StoredKey(key_id, stored_entry(entry), now, now, source="managed")):
        raise ValueError(f"a key with id {key_id!r} exists already (revoked ones keep their id); pick another id, or "
                         f"change its limits with `switchcraft keys set {key_id}`")
    return key


async def set_limits(store: StateStore, key_id: str, changes: dict[str, Any], pool_names: list[str] | None, *,
                     now: float) -> KeyEntry:
    """The key's limits with `changes` applied (requests_per_minute, usd_per_day, models; None removes a limit)."""
    found = await find_key(store, key_id)
    if found.revoked:
        raise ValueError(f"key {key_id!r} is revoked: it stays refused; add a new key instead")
    entry = entry_of(found)
    limits = {**entry.limits.model_dump(), **changes}
    changed = checked_entry({**json.loads(stored_entry(entry)), "limits": limits}, pool_names)
    if not await store.key_change(key_id, now=now, entry=stored_entry(changed)):
        raise ValueError(f"no key {key_id!r} in the state store")
    return changed


async def revoke_key(store: StateStore, key_id: str, *, now: float) -> StoredKey:
    """Refuse the key from now on, on every gateway sharing the store (within auth.refresh_s). Returns the key as it
    was: already revoked when `.revoked`, and then nothing is written."""
    found = await find_key(store, key_id)
    if not found.revoked:
        await store.key_change(key_id, now=now, revoked=True)
    return found


async def seed(store: StateStore, seeds: list[KeyEntry], *, now: float) -> list[str]:
    """Put each seed entry into the store where its id is absent; the ids added. A seed whose id the store holds
    with another entry, or revoked, keeps the store's (logged: the file's entry is not applied)."""
    added = [e.id for e in seeds if await store.key_create(StoredKey(e.id, stored_entry(e), now, now, source="seed"))]
    if len(added) < len(seeds):
        _, stored = await store.keys_read()
        held = {s.id: s for s in stored}
        for e in seeds:
            s = held.get(e.id)
            if e.id in added or s is None:
                continue
            if s.revoked or s.entry != stored_entry(e):
                log.warning(json.dumps({"event": "auth", "seed": e.id, "warning": (
                    "revoked in the state store: it stays refused (remove it from auth.keys_file / keys_env)"
                    if s.revoked else "its entry in auth.keys_file / keys_env differs from the state store's, which "
                    "is used (change it with `switchcraft keys set`, or revoke it and add another id)")}))
    return added


class KeyFeed:
    """The state store's keys behind a KeyStore: seeded and loaded at start, reloaded when the version moved."""

    def __init__(self, keys: KeyStore, store: StateStore, *, refresh_s: float = 1.0,
                 pool_names: list[str] | None = None, clock=time.monotonic) -> None:
        self.keys, self.store, self.refresh_s, self.pool_names, self.clock = keys, store, refresh_s, pool_names, clock
        self.version: int | None = None
        self.seeded = self.started = self.outage = False
        self.checked_at = 0.0
        self.check: asyncio.Future | None = None

    async def start(self) -> None:
        """Seed and load; with the store down, serve the seeds until it is back (said in the log)."""
        self.started, self.checked_at = True, self.clock()
        await self._check()
        if not self.keys.identities():
            log.warning(json.dumps({"event": "auth", "warning": "no API key yet: every request gets 401 until one "
                                    "is added (`switchcraft keys add --id NAME`, or the console's Keys view with "
                                    "an admin key) or given in auth.keys_file / keys_env"}))

    async def refresh(self) -> None:
        """Reload when the store's key version moved, checked at most every refresh_s; concurrent requests share
        one check. While the store is down the check runs beside the requests, which keep the last keys."""
        if not self.started:
            return
        if self.check is None or self.check.done():
            if self.clock() - self.checked_at < self.refresh_s:
                return
            self.checked_at = self.clock()
            self.check = asyncio.ensure_future(self._check())
        if not self.outage:
            await asyncio.shield(self.check)

    async def reload(self) -> None:
        """Load now (after this process wrote a key: the console). StateUnavailable when the store cannot say."""
        self.checked_at = self.clock()
        await self._load()

    async def _check(self) -> None:
        try:
            await self._load()
        except StateUnavailable as e:
            if not self.outage:
                self.outage = True
                log.warning(json.dumps({"event": "auth", "store": "unavailable", "warning": "the API keys cannot be "
                                        f"read from the state store ({e}); serving with the keys loaded last "
                                        "(revoked ones stay refused) until it is back"}))

    async def _load(self) -> None:
        if not self.seeded:
            await seed(self.store, self.keys.seeds, now=time.time())
            self.seeded = True
        if await self.store.keys_version() != self.version:
            version, stored = await self.store.keys_read()
            self._install(version, stored)
        if self.outage:
            self.outage = False
            log.info(json.dumps({"event": "auth", "store": "available", "keys": len(self.keys.identities())}))

    def _install(self, version: int, stored: list[StoredKey]) -> None:
        active, revoked = [], []
        for s in stored:
            try:
                entry = entry_of(s)
            except ValueError as e:  # unreadable: it cannot authenticate anyone
                log.error(json.dumps({"event": "auth", "error": str(e)}))
                continue
            unknown = [m for m in entry.limits.models or [] if self.pool_names and m not in self.pool_names]
            if unknown and not s.revoked:
                log.warning(json.dumps({"event": "auth", "key": s.id, "warning": f"limits.models names {unknown}, "
                                        "not in the served pool"}))
            (revoked if s.revoked else active).append(entry)
        self.keys.install(active, revoked)
        self.version = version
