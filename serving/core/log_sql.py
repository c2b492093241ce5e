"""The decision log's SQL in its two dialects: SQLite (files under `log.path`, one machine) and PostgreSQL (`log.url`,
one database every gateway of a fleet writes and the console reads).

    d = dialect_of(db)                        # SQLITE for a sqlite3 connection, POSTGRES for one of connect()'s
    d.greatest("latency_ms", "0")             # MAX(latency_ms, 0)  |  GREATEST(latency_ms, 0)
    db = connect("postgresql://gw@db:5432/switchcraft")
    db.execute("SELECT * FROM requests WHERE request_id = ?", (rid,)).fetchone()["replica"]

Queries are written once, in the SQL both speak, with SQLite's placeholders (`?`, `:name`); a PostgreSQL
connection from `connect` rewrites them to psycopg's (`%s`, `%(name)s`) and returns rows read like sqlite3.Row
(by position, by column name, `dict(row)`). What the two spell differently is one method of `Dialect`: a scalar
max and min, a truncation to an integer, a dimension of the summary (untyped in SQLite, text in PostgreSQL), the
elements of a JSON array, a substring test, a batch's new rows, a join kept in the order written. Numbers come
back as Python ints where PostgreSQL computed them exactly (integer sums are `numeric` there) and floats otherwise,
as from SQLite.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from data.logged import is_log_url, redact_url

__all__ = ["POSTGRES", "SQLITE", "Dialect", "PgConnection", "connect", "dialect_of", "is_log_url", "redact_url"]


class Dialect:
    """SQLite's spelling; `PostgresDialect` overrides what PostgreSQL spells otherwise."""

    name = "sqlite"
    ordered_join = "CROSS JOIN"  # SQLite joins in the order written only across a CROSS JOIN

    def greatest(self, a: str, b: str) -> str:
        return f"MAX({a}, {b})"

    def least(self, a: str, b: str) -> str:
        return f"MIN({a}, {b})"

    def floor_int(self, expr: str) -> str:
        """A non-negative number's integer part."""
        return f"CAST({expr} AS INTEGER)"

    def dim(self, expr: str) -> str:
        """A dimension of the summary: never NULL ('' stands for it), typed as its column is (SQLite: untyped)."""
        return f"COALESCE({expr}, '')"

    def json_items(self, expr: str, alias: str) -> str:
        """A FROM item (after a comma) of the elements of the JSON array `expr`, as `<alias>.value` (NULL or
        malformed: none)."""
        return f"json_each(CASE WHEN json_valid({expr}) THEN {expr} ELSE '[]' END) {alias}"

    def contains(self, haystack: str, needle: str) -> str:
        return f"instr({haystack}, {needle}) > 0"

    def new_rows(self, column: str, name: str) -> str:
        """The rows a writer's batch added: SQLite's writer is alone on its file, so ids above the last it saw
        (`:name` an id); PostgreSQL's shares the table with other replicas, so the ids it was given (`:name` a list)."""
        return f"{column} > :{name}"


class PostgresDialect(Dialect):
    name = "postgres"
    ordered_join = "JOIN"

    def greatest(self, a: str, b: str) -> str:
        return f"GREATEST({a}, {b})"

    def least(self, a: str, b: str) -> str:
        return f"LEAST({a}, {b})"

    def floor_int(self, expr: str) -> str:
        return f"CAST(FLOOR({expr}) AS BIGINT)"  # a cast alone rounds in PostgreSQL

    def dim(self, expr: str) -> str:
        return f"COALESCE(CAST({expr} AS TEXT), '')"

    def json_items(self, expr: str, alias: str) -> str:
        # only the writer fills these columns, always with a JSON array (or NULL)
        return f"jsonb_array_elements_text(CAST(COALESCE({expr}, '[]') AS jsonb)) AS {alias}(value)"

    def contains(self, haystack: str, needle: str) -> str:
        return f"strpos({haystack}, {needle}) > 0"

    def new_rows(self, column: str, name: str) -> str:
        return f"{column} = ANY(:{name})"


SQLITE, POSTGRES = Dialect(), PostgresDialect()


def dialect_of(db) -> Dialect:
    """The dialect of a connection: a PostgreSQL one from `connect` says so, anything else is SQLite."""
    return getattr(db, "dialect", SQLITE)


# ------------------------------------------------------------------------------------------- PostgreSQL

_LITERAL = re.compile(r"('(?:[^']|'')*')")
_MARK = re.compile(r"\?|(?<![:\w]):([A-Za-z_]\w*)|%")


@functools.lru_cache(maxsize=1024)
def to_pyformat(sql: str) -> str:
    """SQLite's placeholders as psycopg's: `?` -> `%s`, `:name` -> `%(name)s`, a literal `%` doubled (string
    literals are left as written, but for their `%`)."""
    parts = _LITERAL.split(sql)
    for i, part in enumerate(parts):
        if i % 2:
            parts[i] = part.replace("%", "%%")
        else:
            parts[i] = _MARK.sub(lambda m: "%s" if m[0] == "?" else "%%" if m[0] == "%" else f"%({m[1]})s", part)
    return "".join(parts)


class Row(tuple):
    """A row read as sqlite3.Row is: by position (and slice), by column name, and `dict(row)`."""

    def __new__(cls, values, names: dict[str, int]):
        row = super().__new__(cls, values)
        row._names = names
        return row

    def keys(self) -> list[str]:
        return list(self._names)

    def __getitem__(self, key):
        return super().__getitem__(self._names[key] if isinstance(key, str) else key)


def _rows(cursor):
    names = {c.name: i for i, c in enumerate(cursor.description or ())}
    return lambda values: Row(values, names)


def _number_loader():
    from psycopg.adapt import Loader

    class Number(Loader):
        """`numeric` as SQLite would give it: an int when whole (integer sums), else a float."""

        def load(self, data) -> int | float:
            text = bytes(data)
            return int(text) if text.lstrip(b"-").isdigit() else float(text)
    return Number


class PgConnection:
    """A psycopg connection that takes SQLite's placeholders (`execute`) and returns sqlite3.Row-like rows; a
    lost connection is a ConnectionError naming the server (its password left out)."""

    dialect = POSTGRES

    def __init__(self, conn, url: str) -> None:
        self.conn, self.where = conn, redact_url(url)

    def execute(self, sql: str, params: Any = None):
        import psycopg

        try:
            if params is None or (not isinstance(params, dict) and len(params) == 0):
                return self.conn.execute(sql)
            return self.conn.execute(to_pyformat(sql), params)
        except psycopg.OperationalError as e:
            raise ConnectionError(f"the decision log at {self.where}: {str(e).strip()}") from None

    def executemany_returning(self, sql: str, rows: list) -> list[int]:
        """Run an INSERT … RETURNING id once per row (pipelined): the ids, in order."""
        import psycopg

        ids: list[int] = []
        if not rows:
            return ids
        try:
            with self.conn.cursor() as cur:
                cur.executemany(to_pyformat(sql), rows, returning=True)
                while True:
                    ids += [r[0] for r in cur.fetchall()]
                    if not cur.nextset():
                        break
        except psycopg.OperationalError as e:
            raise ConnectionError(f"the decision log at {self.where}: {str(e).strip()}") from None
        return ids

    def transaction(self):
        return self.conn.transaction()

    @property
    def broken(self) -> bool:
        return self.conn.broken or self.conn.closed

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


def connect(url: str, *, autocommit: bool = True, repeatable_read: bool = False) -> PgConnection:
    """A connection to the PostgreSQL log at `url` (ConnectionError naming it when it cannot be reached).
    `repeatable_read`: every query of one transaction reads one snapshot (a reader's page: the summary and the rows
    agree)."""
    import psycopg

    try:
        conn = psycopg.connect(url, autocommit=autocommit, row_factory=_rows, connect_timeout=10)
    except psycopg.Error as e:
        raise ConnectionError(f"the decision log at {redact_url(url)} cannot be reached: {str(e).strip()}") from None
    conn.adapters.register_loader("numeric", _number_loader())
    if repeatable_read:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    return PgConnection(conn, url)
