"""The console's login session: a signed, expiring cookie naming the admin key's id (never the key).

    sessions = Sessions.from_env()                        # $SWITCHCRAFT_CONSOLE_SECRET, else a random secret
    cookie = sessions.issue("ops-admin", now=time.time())  # "<payload>.<hmac>" for Set-Cookie
    sessions.key_id_of(cookie, now=time.time())           # "ops-admin", or None: bad signature, expired, absent

The cookie holds the key id and an expiry, signed with HMAC-SHA256 (the standard library's `hmac`, compared in
constant time). The secret is the environment's `SWITCHCRAFT_CONSOLE_SECRET` when set (several gateway processes
behind one address must share it), else a random one per process: a restart then logs everyone out. The
console checks the named key is still an admin key on every page, so removing a key ends its sessions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets

COOKIE = "switchcraft_console"
SECRET_ENV = "SWITCHCRAFT_CONSOLE_SECRET"
MAX_AGE_S = 8 * 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    def __init__(self, secret: bytes, max_age_s: int = MAX_AGE_S) -> None:
        if len(secret) < 16:
            raise ValueError(f"${SECRET_ENV}: at least 16 characters (a random string: `openssl rand -hex 32`)")
        self.secret, self.max_age_s = secret, max_age_s

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Sessions:
        given = (os.environ if environ is None else environ).get(SECRET_ENV, "")
        return cls(given.encode() if given else secrets.token_bytes(32))

    def _sign(self, payload: str) -> str:
        return hmac.new(self.secret, payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, key_id: str, *, now: float) -> str:
        payload = _b64(json.dumps({"k": key_id, "exp": int(now + self.max_age_s)}).encode())
        return f"{payload}.{self._sign(payload)}"

    def key_id_of(self, cookie: str | None, *, now: float) -> str | None:
        """The key id a valid, unexpired cookie names; None for anything else."""
        if not cookie or cookie.count(".") != 1:
            return None
        payload, signature = cookie.split(".")
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            data = json.loads(_unb64(payload))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("exp"), int) or data["exp"] <= now:
            return None
        key_id = data.get("k")
        return key_id if isinstance(key_id, str) else None
