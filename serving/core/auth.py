"""Inbound authentication: API keys (stored hashed) → a caller identity and its limits.

    keys = store_keys(cfg.auth, pool.names, state)    # managed_keys.py: keys_file (hashed) + keys_env (JSON) seed the store
    await keys.start()                                                # the seeds into the store, its keys loaded
    ident = await keys.verify(request.headers.get("authorization"))   # Identity; GatewayError(401) without a valid key
    who = narrow(ident.caller, body_caller, "switchcraft.caller")     # the body may only narrow it (403 otherwise)
    ident.admin                                                       # the key's role: admin may read spend
Limits (requests per minute, USD per day) are enforced in serving/core/budget.py, on counts kept in
serving/core/state.py (SQLite or Redis): they survive restarts and span gateway processes.

The keys live in the state store (serving/core/managed_keys.py: `switchcraft keys add|set|revoke|list`, the
console's Keys view), shared by every replica and reloaded when they change. The key file and the environment
are its seed: each entry is put there at start if its id is absent. A key file (YAML; `switchcraft gateway-key`
makes a key and prints its entry):

    keys:
      - id: acme-support              # the name in logs and metrics (the key itself never is)
        sha256: 3f1c…                 # sha256 (hex) of the key
        caller: {tenant: acme, roles: [support], permissions: [], environment: prod}
        limits: {requests_per_minute: 120, usd_per_day: 5.0, models: [gpt-4o-mini-2024-07-18]}
        role: caller                  # caller (default) | admin: may also read /metrics, /readyz details, spend

The environment variable (`auth.keys_env`) holds a JSON list of the same
entries; there an entry may give the key itself (`key`) instead of its hash: it
is hashed when read and only the hash is kept. Keys are 256-bit random strings
(`sk-sc-…`), which is why an unsalted sha256 is enough to store them: there is
no dictionary to guess from. `auth.mode: none` serves without keys (local use
only, announced at start): every request then has the identity
`auth.local_caller`, which a body may narrow like a key's.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from serving.core.errors import GatewayError, bad, retry_after_headers, retry_after_ms
from serving.tools.policy import Caller

KEY_PREFIX = "sk-sc-"
MIN_KEY_CHARS = 24  # a key given in the environment: long enough that its unsalted hash cannot be guessed
RESERVED_PREFIX = "__"  # key ids the gateway spends under itself
OPERATOR_KEY = "__explore__"  # the exploration budget's key id (serving/gateway/explore.py)


class KeyLimits(BaseModel):
    """What one key may spend: none of these set means no limit."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=1, description="Over the last 60 s; then 429.")
    usd_per_day: float | None = Field(default=None, gt=0, description="Spend per UTC day (every call's cost, "
                                      "abandoned ones at their estimate); once reached, 429 until midnight UTC.")
    models: list[str] | None = Field(default=None, min_length=1, description="The pool models this key may use.")


class KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$", description="The key's name in logs and metrics.")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="sha256 hex of the key.")
    key: str | None = Field(default=None, min_length=MIN_KEY_CHARS, description="The key itself (environment only).")
    caller: Caller = Field(default_factory=Caller, description="The identity requests with this key have.")
    limits: KeyLimits = Field(default_factory=KeyLimits)
    role: Literal["caller", "admin"] = Field(default="caller", description="admin: may also read the gateway's "
                                             "operator surfaces (/metrics, /readyz details, /v1/admin/spend).")

    @field_validator("id")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        if v.startswith(RESERVED_PREFIX):
            raise ValueError(f"{v!r} is reserved: ids starting with {RESERVED_PREFIX!r} are the gateway's own "
                             "(exploration spends as '__explore__'); pick another id")
        return v

    @model_validator(mode="after")
    def _one_secret(self) -> KeyEntry:
        if (self.sha256 is None) == (self.key is None):
            raise ValueError("give exactly one of sha256 (the key's hash) or key (the key, environment only)")
        return self

    def digest(self) -> str:
        return self.sha256 or hash_key(self.key or "")


class AuthSettings(BaseModel):
    """`auth:` in configs/serving.yaml."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["keys", "none"] = Field(default="keys", description="keys: every request needs a valid key; "
                                          "none: unauthenticated, for local use only (announced at start).")
    keys_file: str | None = Field(default=None, description="YAML with `keys: [{id, sha256, caller, limits}]`.")
    keys_env: str | None = Field(default="SWITCHCRAFT_GATEWAY_KEYS", description="Environment variable with a "
                                 "JSON list of key entries (sha256 or key).")
    local_caller: Caller = Field(default_factory=Caller, description="mode none: every request's identity.")
    local_limits: KeyLimits = Field(default_factory=KeyLimits, description="mode none: its limits.")
    refresh_s: float = Field(default=1.0, ge=0, le=3600, description="How often at most a gateway asks the state "
                             "store whether its keys changed (a revoked key is refused within this; 0: every "
                             "request).")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Identity:
    """Who a request is: the key's name (never the key), its caller identity and limits."""

    key_id: str
    caller: Caller
    limits: KeyLimits
    admin: bool = False


class KeyStore:
    """The keys a gateway accepts. Built from entries it is fixed; with a `feed` (serving/core/managed_keys.py
    `store_keys`) they are the state store's, seeded from the entries, and reloaded by `refresh()` on the
    requests' path when the store's version moved."""

    def __init__(self, entries: list[KeyEntry], *, mode: str = "keys", local: Identity | None = None) -> None:
        self.mode, self.local = mode, local
        self.feed = None  # a KeyFeed when the keys live in the state store
        seen: set[str] = set()
        for e in entries:
            if e.id in seen:
                raise ValueError(f"auth: key id {e.id!r} is listed twice; give each key its own id")
            seen.add(e.id)
        self.seeds = list(entries)
        self.install(entries, [])

    def install(self, entries: list[KeyEntry], revoked: list[KeyEntry]) -> None:
        """Accept `entries` from now on; refuse `revoked` as revoked."""
        self.by_digest = {e.digest(): Identity(e.id, e.caller, e.limits, e.role == "admin") for e in entries}
        self.revoked = {e.digest() for e in revoked}

    @classmethod
    def from_settings(cls, settings: AuthSettings, pool_names: list[str] | None = None,
                      environ: dict[str, str] | None = None, *, durable_store: bool = False) -> KeyStore:
        """The keys of `settings` (file, then environment), checked; ValueError naming the source and field.
        `durable_store`: they seed a durable state store's keys (managed_keys.store_keys), so none may be given."""
        if settings.mode == "none":
            keys = cls([], mode="none", local=Identity("local", settings.local_caller, settings.local_limits, True))
        else:
            entries = configured_entries(settings, environ)
            if not entries and not durable_store:
                raise ValueError("auth.mode is keys but no keys are configured: make one with `switchcraft gateway-key "
                                 "--id NAME` and put its entry in auth.keys_file or $" + str(settings.keys_env)
                                 + ", or keep keys in a state store (state.path or state.redis_url) and add them "
                                 "with `switchcraft keys add --id NAME`, or set auth.mode=none to serve "
                                 "unauthenticated (local use only)")
            keys = cls(entries)
        for ident in keys.identities():
            unknown = [m for m in ident.limits.models or [] if pool_names is not None and m not in pool_names]
            if unknown:
                raise ValueError(f"auth: key {ident.key_id!r} limits.models names {unknown}, not in the pool; "
                                 f"pool: {', '.join(pool_names or [])}")
        return keys

    def identities(self) -> list[Identity]:
        """Every key accepted now (revoked ones are not)."""
        return [self.local] if self.local else list(self.by_digest.values())

    async def start(self) -> None:
        """The state store's keys, seeded from the configured ones (at the door's start; nothing without a store)."""
        if self.feed is not None:
            await self.feed.start()

    async def refresh(self) -> None:
        """Reload the store's keys when they changed (checked at most every auth.refresh_s)."""
        if self.feed is not None:
            await self.feed.refresh()

    async def verify(self, authorization: str | None) -> Identity:
        """`authenticate`, on the keys as they are now in the store."""
        await self.refresh()
        return self.authenticate(authorization)

    def authenticate(self, authorization: str | None) -> Identity:
        """The identity of `Authorization: Bearer <key>`; GatewayError(401) without a valid key."""
        if self.mode == "none":
            return self.local  # type: ignore[return-value]
        scheme, _, key = (authorization or "").partition(" ")
        if not authorization:
            raise unauthorized("missing_key", "no API key: send the header `Authorization: Bearer <key>`")
        if scheme.lower() != "bearer" or not key.strip():
            raise unauthorized("missing_key", "the Authorization header must be `Bearer <key>`")
        digest = hash_key(key.strip())
        if digest in self.revoked:
            raise unauthorized("revoked", "the API key was revoked (keys are not echoed back); ask the operator for "
                               "a new one")
        ident = self.by_digest.get(digest)
        if ident is None:
            raise unauthorized("invalid_key", "the API key is not valid (keys are not echoed back); ask the operator "
                               "for one made with `switchcraft keys add` or `switchcraft gateway-key`")
        return ident


def configured_entries(settings: AuthSettings, environ: dict[str, str] | None = None) -> list[KeyEntry]:
    """The entries of auth.keys_file, then of $auth.keys_env (ValueError naming the source and field)."""
    entries = []
    if settings.keys_file:
        entries += read_key_file(settings.keys_file)
    raw = (os.environ if environ is None else environ).get(settings.keys_env or "", "")
    if raw.strip():
        entries += parse_entries(raw, f"${settings.keys_env}")
    return entries


def unauthorized(reason: str, message: str) -> GatewayError:
    return GatewayError(401, message, type="authentication_error", headers={"www-authenticate": "Bearer"},
                        reason=reason)


def forbidden(reason: str, message: str, param: str) -> GatewayError:
    return GatewayError(403, f"{param}: {message}", type="permission_error", param=param, reason=reason)


def parse_entries(text: str, source: str) -> list[KeyEntry]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{source}: not JSON ({e.msg}); give a list of key entries "
                         '[{"id": …, "sha256": …, "caller": {…}, "limits": {…}}]') from None
    return _entries(data, source, allow_plain=True)


def read_key_file(path: str | Path) -> list[KeyEntry]:
    from data.yaml_config import read_yaml

    data = read_yaml(path, hint="set auth.keys_file to a file made with `switchcraft gateway-key --out FILE`")
    keys = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(keys, list):
        raise ValueError(f"{path}: needs `keys:` with a list of key entries (id, sha256, caller, limits)")
    return _entries(keys, str(path), allow_plain=False)


def first_error(e: ValidationError) -> tuple[str, str]:
    """A pydantic error's first complaint: (the field's dotted path, or "", what is wrong with it)."""
    first = e.errors()[0]
    return ".".join(str(x) for x in first["loc"]), first["msg"].removeprefix("Value error, ")


def _entries(data: Any, source: str, *, allow_plain: bool) -> list[KeyEntry]:
    if not isinstance(data, list):
        raise ValueError(f"{source}: must be a list of key entries")
    out = []
    for i, raw in enumerate(data):
        try:
            entry = KeyEntry.model_validate(raw)
        except ValidationError as e:
            where, message = first_error(e)
            raise ValueError(f"{source}: keys[{i}]{'.' + where if where else ''}: {message}") from None
        if entry.key is not None and not allow_plain:
            raise ValueError(f"{source}: keys[{i}] ({entry.id}) holds the key itself; a file stores only its hash: "
                             f"sha256: {hash_key(entry.key)}")
        out.append(entry)
    return out


def narrow(base: Caller, asked: Any, where: str) -> Caller:
    """The identity a request runs as: the key's `base`, narrowed by the body's caller field (`asked`).

    Fields the body leaves out keep the key's values. The body may drop the
    tenant (""), drop roles and permissions, never add any, and never change
    the environment; anything else is a 403 naming the field.
    """
    if asked is None:
        return base
    given = {"tenant": asked} if isinstance(asked, str) else asked if isinstance(asked, dict) else None
    parsed = caller_from(asked, where)  # 400 for a malformed caller, before any permission check
    if given is None:
        return base
    update: dict[str, Any] = {}
    if "tenant" in given:
        if parsed.tenant not in ("", base.tenant):
            raise forbidden("caller", f"tenant {parsed.tenant!r} is not this API key's (its tenant: "
                            f"{base.tenant or 'none'}); the body may only narrow the key's identity", f"{where}.tenant"
                            if isinstance(asked, dict) else where)
        update["tenant"] = parsed.tenant
    for key in ("roles", "permissions"):
        if key in given:
            extra = sorted(set(getattr(parsed, key)) - set(getattr(base, key)))
            if extra:
                raise forbidden("caller", f"{extra} not granted to this API key (its {key}: "
                                f"{', '.join(getattr(base, key)) or 'none'}); the body may only narrow the key's "
                                "identity", f"{where}.{key}")
            update[key] = getattr(parsed, key)
    if "environment" in given and parsed.environment != base.environment:
        raise forbidden("caller", f"{parsed.environment!r} is not this API key's environment ({base.environment}); "
                        "the body may only narrow the key's identity", f"{where}.environment")
    if isinstance(asked, str):  # a string names only the tenant: no roles, no permissions (as before keys)
        update.update(roles=(), permissions=())
    return base.model_copy(update=update)


def caller_from(value: Any, where: str) -> Caller:
    """None → an anonymous caller (no tenant, no roles); "acme" → tenant acme; an object → Caller fields."""
    if value is None:
        return Caller()
    if isinstance(value, str):
        return Caller(tenant=value)
    if isinstance(value, dict):
        try:
            return Caller(**value)
        except (ValidationError, TypeError) as e:
            first = e.errors()[0] if isinstance(e, ValidationError) else {"loc": (), "msg": str(e)}
            field = ".".join(str(x) for x in first["loc"])
            raise bad(first["msg"], f"{where}.{field}" if field else where) from None
    raise bad("must be a string (tenant) or an object {tenant, roles, permissions, environment}", where)


def restrict_models(allowed: frozenset[str] | None, ident: Identity, where: str) -> frozenset[str] | None:
    """The request's allowed models within the key's: a model the key may not use is a 403."""
    keyed = ident.limits.models
    if keyed is None:
        return allowed
    if allowed is None:
        return frozenset(keyed)
    outside = sorted(allowed - set(keyed))
    if outside:
        raise forbidden("model", f"{outside} not allowed for this API key (it may use: {', '.join(keyed)})", where)
    return allowed


def too_many(reason: str, message: str, wait_s: float) -> GatewayError:
    """A key's 429: Retry-After (and retry-after-ms) `wait_s` from now, the message in whole seconds."""
    ms = retry_after_ms(wait_s)
    return GatewayError(429, f"{message}; retry after {math.ceil(ms / 1e3)} s", type="rate_limit_error",
                        headers=retry_after_headers(ms), reason=reason)


async def admin_of(door, request) -> Identity:
    """The request's admin identity; 401 without a valid key, 403 for a key without the admin role. `door` is
    any surface with the gateway's `keys` (KeyStore) and `metrics` (GatewayMetrics): the admin API, the console."""
    ident = await door.keys.verify(request.headers.get("authorization"))
    if not ident.admin:
        door.metrics.auth_rejections.labels(key=ident.key_id, reason="admin").inc()
        raise forbidden("admin", "this API key is not an admin key (role: admin in its entry)", "authorization")
    return ident
