"""The console's login session: a signed, expiring cookie naming the admin key's id (never the key).

    sessions = Sessions.from_env(max_age_s=28800)         # $SWITCHCRAFT_CONSOLE_SECRET, else a random secret
    cookie = sessions.issue("ops-admin", now=time.time())  # "<payload>.<hmac>" for Set-Cookie
    s = sessions.read(cookie, now=time.time())            # Session(key_id, sid, exp), or None: bad signature, expired
    await revoke(gw.state, s, now=time.time())            # logout: every replica refuses the cookie from now on
    await revoked(gw.state, s, now=time.time())           # True once logged out (StateUnavailable: cannot tell)

The cookie holds the key id, a random session id and an expiry, signed with HMAC-SHA256 (the standard library's
`hmac`, compared in constant time). The secret is the environment's `SWITCHCRAFT_CONSOLE_SECRET` when set
(several gateway processes behind one address must share it), else a random one per process: a restart then
logs everyone out. The console checks the named key is still an admin key on every page, so removing a key ends
its sessions. A signed cookie stays valid until its expiry wherever it is replayed, so logging out records the
session id in the gateway's state store (SQLite, or the Redis every replica shares) until that expiry.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass

COOKIE = "switchcraft_console"
SECRET_ENV = "SWITCHCRAFT_CONSOLE_SECRET"
MAX_AGE_S = 8 * 3600
REVOKED = "console-logout:"  # prefix of a revoked session's id in the state store (agent sessions are bare hex)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Session:
    key_id: str
    sid: str  # random per login: what a logout revokes
    exp: int  # unix time the cookie stops being accepted


class Sessions:
    def __init__(self, secret: bytes, max_age_s: int = MAX_AGE_S) -> None:
        if len(secret) < 16:
            raise ValueError(f"${SECRET_ENV}: at least 16 characters (a random string: `openssl rand -hex 32`)")
        self.secret, self.max_age_s = secret, max_age_s

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, max_age_s: int = MAX_AGE_S) -> Sessions:
        given = (os.environ if environ is None else environ).get(SECRET_ENV, "")
        return cls(given.encode() if given else secrets.token_bytes(32), max_age_s)

    def _sign(self, payload: str) -> str:
        return hmac.new(self.secret, payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, key_id: str, *, now: float) -> str:
        payload = _b64(json.dumps({"k": key_id, "s": secrets.token_hex(16), "exp": int(now + self.max_age_s)}).encode())
        return f"{payload}.{self._sign(payload)}"

    def read(self, cookie: str | None, *, now: float) -> Session | None:
        """The session a valid, unexpired cookie holds; None for anything else (revocation is checked apart)."""
        if not cookie or cookie.count(".") != 1:
            return None
        payload, signature = cookie.split(".")
        if not hmac.compare_digest(self._sign(payload).encode(), signature.encode("utf-8", "replace")):
            return None
        try:
            data = json.loads(_unb64(payload))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("exp"), int) or data["exp"] <= now:
            return None
        key_id, sid = data.get("k"), data.get("s")
        return Session(key_id, sid, data["exp"]) if isinstance(key_id, str) and isinstance(sid, str) and sid else None

    def key_id_of(self, cookie: str | None, *, now: float) -> str | None:
        """The key id a valid, unexpired cookie names; None for anything else."""
        session = self.read(cookie, now=now)
        return session.key_id if session else None


async def revoke(store, session: Session, *, now: float) -> None:
    """Refuse this session's cookie from now until it expires, in every process sharing the state store."""
    await store.session_put(REVOKED + session.sid, "revoked", now=now, ttl_s=max(1.0, session.exp - now))


async def revoked(store, session: Session, *, now: float) -> bool:
    """Whether the session was logged out (StateUnavailable when the store cannot say)."""
    return await store.session_get(REVOKED + session.sid, now) is not None
