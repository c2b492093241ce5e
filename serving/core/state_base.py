"""The state store's interface and records (serving/core/state.py says what is kept and why): what a
backend (state_sqlite.py, state_redis.py) implements and what its callers hold."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


KINDS = ("answer", "cascade", "abandoned", "estimated", "expired", "explore")
WINDOW_S = 60.0
SWEEP_EVERY_S = 1.0  # expired reservations are looked for at most this often per process
SESSION_PRUNE_EVERY_S = 60.0  # defaults of `state.session_prune_every_s` and `state.session_prune_batch`
SESSION_PRUNE_BATCH = 1_000
THREADS = 8  # worker threads a SQLite store may hold (calls beyond wait for one, within their deadline)


def utc_day(now: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(now))


class StateUnavailable(Exception):
    """The store could not be read or written (the text says which store and why, never a key)."""


class OverBudget(Exception):
    def __init__(self, spent: float, reserved: float) -> None:
        super().__init__(f"spent {spent:.6f}, reserved {reserved:.6f}")
        self.spent, self.reserved = spent, reserved


@dataclass(frozen=True)
class Admission:
    """`admit`'s answer: `reason` is None when the request was admitted (and counted)."""

    reason: str | None  # None | "budget" | "rate_limit"
    wait_s: float = 0.0
    spent: float = 0.0
    reserved: float = 0.0


@dataclass(frozen=True)
class Reservation:
    id: str
    key_id: str
    day: str
    usd: float  # held now: the first step's, plus every extension
    request_id: str = ""
    created: float = 0.0  # when the hold was made (time.time()): how long holds last is learnt from it


@dataclass(frozen=True)
class Charge:
    """One call's cost on the ledger."""

    model: str
    kind: str  # one of KINDS
    usd: float

    @property
    def estimated(self) -> bool:
        """Priced by an estimate, not by the provider's usage: abandoned, estimated and expired charges."""
        return self.kind in ("abandoned", "estimated", "expired")

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ledger kind {self.kind!r}; known: {', '.join(KINDS)}")


@dataclass(frozen=True)
class StoredKey:
    """An API key the store keeps (serving/core/managed_keys.py): its entry is the key's JSON entry without the key
    itself (id, sha256, caller, limits, role)."""

    id: str
    entry: str  # JSON
    created: float
    updated: float
    revoked: bool = False
    source: str = "managed"  # seed: put in from auth.keys_file / keys_env; managed: `switchcraft keys`, the console


@dataclass(frozen=True)
class LedgerRow:
    ts: float
    day: str
    key_id: str
    model: str
    kind: str
    usd: float
    request_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"ts": self.ts, "day": self.day, "key": self.key_id, "model": self.model, "kind": self.kind,
                "usd": self.usd, "request_id": self.request_id}


class StateStore(ABC):
    """The gateway's shared counts and ledger. Every method raises StateUnavailable when the store fails."""

    name = "state"
    durable = True
    reservation_ttl_s = 3600.0

    @abstractmethod
    async def admit(self, key_id: str, *, rpm: int | None, usd_per_day: float | None, now: float) -> Admission:
        """Refuse when the day's budget is used up (`spent + reserved >= usd_per_day`) or `rpm` requests came in
        the last 60 s; otherwise count this request in the window. Atomic across processes."""

    @abstractmethod
    async def reserve(self, key_id: str, usd: float, *, limit: float | None, request_id: str,
                      now: float) -> Reservation:
        """Hold `usd` against today's budget; OverBudget when `spent + reserved >= limit` already."""

    @abstractmethod
    async def extend(self, res: Reservation, usd: float, *, limit: float | None, now: float) -> Reservation:
        """Hold `usd` more on `res` (one hold, settled once); OverBudget when `spent + reserved >= limit` already.
        A hold already charged as expired is returned as it was (nothing is left to extend)."""

    @abstractmethod
    async def holds(self, key_id: str, day: str, now: float) -> list[tuple[float, float, str]]:
        """(created, usd, reservation id) of every hold of `key_id` on `day` still in flight: when each may clear."""

    @abstractmethod
    async def settle(self, res: Reservation, charges: list[Charge], *, now: float) -> None:
        """Release the reservation and charge what the calls really cost, one ledger row a charge."""

    @abstractmethod
    async def day_total(self, key_id: str, day: str) -> tuple[float, float]:
        """(spent, reserved) of `key_id` on `day`."""

    @abstractmethod
    async def ledger(self, key_id: str | None = None, day: str | None = None) -> list[LedgerRow]:
        """The ledger's rows, oldest first, optionally of one key and one UTC day (YYYY-MM-DD)."""

    @abstractmethod
    async def ping(self) -> None:
        """StateUnavailable when the store cannot be reached."""

    async def aclose(self) -> None:
        return None

    @abstractmethod
    async def keys_version(self) -> int:
        """The API keys' version: a counter every key write changes (a replica reloads the keys when it moved)."""

    @abstractmethod
    async def keys_read(self) -> tuple[int, list[StoredKey]]:
        """The version and every stored key (revoked ones included), read together, ordered by id."""

    @abstractmethod
    async def key_create(self, key: StoredKey) -> bool:
        """Store a new key; False (nothing written) when its id is taken. Atomic with the version's change."""

    @abstractmethod
    async def key_change(self, key_id: str, *, now: float, entry: str | None = None,
                         revoked: bool | None = None) -> bool:
        """Replace a key's entry and/or set its revoked flag (`updated` becomes `now`); False when no key has the id."""

    @abstractmethod
    async def session_get(self, sid: str, now: float) -> str | None:
        """A session's state (JSON) unless it expired."""

    @abstractmethod
    async def session_put(self, sid: str, raw: str, *, now: float, ttl_s: float) -> None:
        """Store a session's state (JSON), forgotten `ttl_s` after `now` (and deleted once expired)."""
