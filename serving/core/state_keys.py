"""API keys in the state store, for both backends: each key id's entry (its sha256, never the key), when it was
created and last changed, whether it is revoked and where it came from (seed or managed); and one version counter
that every key write changes in the same atomic step, so a gateway replica learns with one cheap read whether it
must reload the keys (serving/core/managed_keys.py).

    SQLite: tables `api_keys` (id primary key) and `versions` (name `keys`), written in BEGIN IMMEDIATE transactions.
    Redis:  a hash `<prefix>key:<id>` per key, the set `<prefix>keys` of ids and the counter `<prefix>keys:version`,
            each write one Lua script.

`SQLiteKeys` and `RedisKeys` are the two stores' key methods (state_sqlite.py, state_redis.py inherit them).
"""

from __future__ import annotations

from serving.core.state_base import StoredKey

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (id TEXT PRIMARY KEY, entry TEXT NOT NULL, created REAL NOT NULL,
                                     updated REAL NOT NULL, revoked INTEGER NOT NULL DEFAULT 0, source TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS versions (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
FIELDS = ("entry", "created", "updated", "revoked", "source")


class SQLiteKeys:
    """The key methods of SQLiteState (its `_run` and `db`)."""

    def _keys_version(self) -> int:
        row = self.db.execute("SELECT value FROM versions WHERE name = 'keys'").fetchone()
        return row[0] if row else 0

    def _bump_keys(self) -> None:
        self.db.execute("INSERT INTO versions (name, value) VALUES ('keys', 1) "
                        "ON CONFLICT (name) DO UPDATE SET value = value + 1")

    async def keys_version(self) -> int:
        return await self._run(self._keys_version)

    async def keys_read(self) -> tuple[int, list[StoredKey]]:
        def read() -> tuple[int, list[StoredKey]]:
            # The version first: a write landing between the two reads leaves an older version beside newer rows,
            # which the next check reloads; never a newer version beside older rows, which it would not.
            version = self._keys_version()
            rows = self.db.execute(f"SELECT id, {', '.join(FIELDS)} FROM api_keys ORDER BY id").fetchall()
            return version, [StoredKey(i, e, c, u, bool(r), s) for i, e, c, u, r, s in rows]
        return await self._run(read)

    async def key_create(self, key: StoredKey) -> bool:
        def create() -> bool:
            added = self.db.execute(f"INSERT OR IGNORE INTO api_keys (id, {', '.join(FIELDS)}) VALUES (?, ?, ?, ?, ?, ?)",
                                    (key.id, key.entry, key.created, key.updated, int(key.revoked), key.source)).rowcount
            if added:
                self._bump_keys()
            return bool(added)
        return await self._run(create, write=True)

    async def key_change(self, key_id: str, *, now: float, entry: str | None = None,
                         revoked: bool | None = None) -> bool:
        def change() -> bool:
            found = self.db.execute("UPDATE api_keys SET entry = COALESCE(?, entry), revoked = COALESCE(?, revoked), "
                                    "updated = ? WHERE id = ?",
                                    (entry, None if revoked is None else int(revoked), now, key_id)).rowcount
            if found:
                self._bump_keys()
            return bool(found)
        return await self._run(change, write=True)


# KEYS: the key's hash, the ids' set, the version. ARGV: id, entry, created, updated, revoked (0/1), source.
KEY_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'entry', ARGV[2], 'created', ARGV[3], 'updated', ARGV[4], 'revoked', ARGV[5],
           'source', ARGV[6])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[3])
return 1
"""

# KEYS: the key's hash, the version. ARGV: now, the new entry ('' keeps it), revoked 0/1 ('' keeps it).
KEY_CHANGE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'entry', ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'revoked', ARGV[3])
end
redis.call('HSET', KEYS[1], 'updated', ARGV[1])
redis.call('INCR', KEYS[2])
return 1
"""

# KEYS: the ids' set, the version. ARGV: the prefix of a key's hash. {version, then id and its five fields per key}.
KEYS_READ = """
local out = {redis.call('GET', KEYS[2]) or '0'}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local r = redis.call('HMGET', ARGV[1] .. id, 'entry', 'created', 'updated', 'revoked', 'source')
  if r[1] then
    table.insert(out, id)
    for i = 1, 5 do
      table.insert(out, r[i] or '')
    end
  end
end
return out
"""


class RedisKeys:
    """The key methods of RedisState (its `redis`, `_call` and `_k`)."""

    def _register_key_scripts(self) -> None:
        self._key_create = self.redis.register_script(KEY_CREATE)
        self._key_change = self.redis.register_script(KEY_CHANGE)
        self._keys_read = self.redis.register_script(KEYS_READ)

    async def keys_version(self) -> int:
        return int(await self._call(self.redis.get(self._k("keys", "version"))) or 0)

    async def keys_read(self) -> tuple[int, list[StoredKey]]:
        out = await self._call(self._keys_read(keys=[self._k("keys"), self._k("keys", "version")],
                                               args=[self._k("key", "")]))
        keys = [StoredKey(out[i], out[i + 1], float(out[i + 2]), float(out[i + 3]), out[i + 4] == "1", out[i + 5])
                for i in range(1, len(out), 6)]
        return int(out[0]), sorted(keys, key=lambda k: k.id)

    async def key_create(self, key: StoredKey) -> bool:
        return bool(await self._call(self._key_create(
            keys=[self._k("key", key.id), self._k("keys"), self._k("keys", "version")],
            args=[key.id, key.entry, repr(key.created), repr(key.updated), int(key.revoked), key.source])))

    async def key_change(self, key_id: str, *, now: float, entry: str | None = None,
                         revoked: bool | None = None) -> bool:
        return bool(await self._call(self._key_change(
            keys=[self._k("key", key_id), self._k("keys", "version")],
            args=[repr(now), entry or "", "" if revoked is None else int(revoked)])))
