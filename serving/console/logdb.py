"""The decision log opened read-only as one SQL database: every file (rotated ones too) behind two views.

    with open_log("runs/gateway/log") as db:                 # data/logged.py names the files
        db.execute("SELECT COUNT(*) FROM requests WHERE ts >= ?", (since,)).fetchone()

    with open_log("runs/gateway/log", since=since_of("24h")) as db:   # the views hold only the last day
    with open_log("postgresql://console@db:5432/switchcraft") as db:  # a fleet's log (log.url): every replica's

The views `requests` and `answers` are `UNION ALL`s over each file's own tables, so every query runs in SQLite
and nothing loads the whole log into Python. A time range is applied when the log is opened, on the indexed row
ids: rows are appended in time order, so a binary search on `id` finds each file's first request of the range
(searched from `SLACK_S` earlier, then filtered on `ts` exactly: a request is logged when it ends, at most a few
minutes after it arrived) and the first answer written for it; a range then reads only its own rows, whatever
the log's size. The answers of a range are those logged from its first request on (an exploration's answers
to a request just before the range may be among them). The files are attached read-only (`mode=ro`): the
console and `switchcraft traffic report` never write the gateway's log.

A PostgreSQL log (`log.url`) is opened the same way, as one "file" (its schema): temporary views of the same
names over its tables, one snapshot for every query of the connection (repeatable read, rolled back at the end),
the same queries with SQLite's placeholders (serving/core/log_sql.py rewrites them, and `db.dialect` spells what
differs).
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from data.logged import FILE, log_files
from serving.core.log_sql import SQLITE, PgConnection, connect, is_log_url, redact_url
from serving.core.log_tables import MEASURES, NEEDS, facet_sql, typed_dims

RANGES = {"1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400, "all": None}
DEFAULT_RANGE = "7d"
COLUMNS = {"requests": ("id", "ts", "request_id", "key_id", "router_version", "kind", "status", "example_id",
                        "routed", "chosen", "rule", "strategy", "verdict", "kinds", "answered_by", "cost_usd",
                        "latency_ms", "stream", "request", "overhead_ms", "replica"),
           "answers": ("id", "request_id", "model", "role", "outcome", "latency_ms", "cost_usd", "input_tokens",
                       "output_tokens", "calls", "raw", "decoder", "decode_error")}


def since_of(range_name: str, now: float | None = None) -> float:
    """The first timestamp a range covers (0 for `all`); ValueError naming the known ranges."""
    if range_name not in RANGES:
        raise ValueError(f"range {range_name!r}: give one of {', '.join(RANGES)}")
    span = RANGES[range_name]
    return 0.0 if span is None else (time.time() if now is None else now) - span


SLACK_S = 600.0


def first_id(db: sqlite3.Connection, table: str, since: float) -> int:
    """The smallest request id of `table` (an attached file's) from which every row has `ts >= since - SLACK_S`
    (a binary search on the primary key: about 20 lookups for a million rows)."""
    # MIN and MAX apart: together in one SELECT they scan the table, alone each is one index lookup
    lo = db.execute(f"SELECT COALESCE(MIN(id), 0) FROM {table}").fetchone()[0]
    hi = db.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}").fetchone()[0]
    target = since - SLACK_S
    while lo < hi:
        mid = (lo + hi) // 2
        row = db.execute(f"SELECT id, ts FROM {table} WHERE id >= ? ORDER BY id LIMIT 1", (mid,)).fetchone()
        if row is None or row[1] >= target:
            hi = mid
        else:
            lo = row[0] + 1
    return lo


def first_answer_id(db: sqlite3.Connection, schema: str, request_id_from: int) -> int:
    """The first answer id written for the requests from `request_id_from` on (0: look at every answer)."""
    if db.execute(f"SELECT 1 FROM {schema}.requests WHERE id >= ? LIMIT 1", (request_id_from,)).fetchone() is None:
        return db.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {schema}.answers").fetchone()[0]  # none in range
    row = db.execute(f"SELECT MIN(a.id) FROM {schema}.answers a WHERE a.request_id IN (SELECT request_id FROM "
                     f"{schema}.requests WHERE id >= ? ORDER BY id LIMIT 64)", (request_id_from,)).fetchone()
    return row[0] if row[0] is not None else 0


@dataclass
class LogFile:
    """One attached file of the log: its schema name, the first request and answer ids of the range, and
    whether it holds the writer's per-hour summary."""
    schema: str
    path: Path | str  # a file, or the PostgreSQL URL (without its password)
    first_request: int
    first_answer: int
    summary: bool
    columns: frozenset[str]  # of its `requests` table: a file older than a column reads it as null


class LogConnection(sqlite3.Connection):
    """The connection `open_log` returns: `files` (oldest first) and `since`, for the queries that read each file
    on its own (the summary, the newest rows first); `dialect` (serving/core/log_sql.py). A PostgreSQL log's
    connection (PgConnection) has the same three."""
    files: list[LogFile]
    since: float
    dialect = SQLITE


@contextmanager
def open_log(source: str | Path, since: float = 0.0) -> Iterator[LogConnection | PgConnection]:
    """A connection whose `requests` and `answers` views span every file of the log (or the PostgreSQL log at a
    postgresql:// URL), holding only what was logged from `since` on (FileNotFoundError when there is no log yet;
    ConnectionError when PostgreSQL cannot be reached). SQLite attaches at most 10 files by default: more than the
    log keeps (`log.keep`)."""
    if is_log_url(source):
        with _open_postgres(str(source), since) as db:
            yield db
        return
    files = log_files(source)
    if not files:
        raise FileNotFoundError(f"{source}: no decision log ({FILE}); serve with log.path={source} first")
    db = sqlite3.connect(":memory:", uri=True, check_same_thread=False, factory=LogConnection)
    db.row_factory = sqlite3.Row
    db.files, db.since = [], since
    try:
        for i, path in enumerate(files):
            db.execute(f"ATTACH DATABASE ? AS f{i}", (f"file:{quote(str(Path(path).resolve()))}?mode=ro",))
            summary = db.execute(f"SELECT 1 FROM f{i}.sqlite_master WHERE name = 'summary'").fetchone() is not None
            columns = frozenset(r[1] for r in db.execute(f"PRAGMA f{i}.table_info(requests)"))
            db.files.append(_log_file(db, f"f{i}", Path(path), since, summary, columns))
        _views(db)
        yield db
    finally:
        db.close()


@contextmanager
def _open_postgres(url: str, since: float) -> Iterator[PgConnection]:
    db = connect(url, autocommit=False, repeatable_read=True)
    db.since = since
    try:
        schema = db.execute("SELECT current_schema()").fetchone()[0]
        if db.execute("SELECT to_regclass(?)", (f"{schema}.requests",)).fetchone()[0] is None:
            raise FileNotFoundError(f"{redact_url(url)}: no decision log there yet (no requests table); serve "
                                    "with log.url set to it first")
        db.files = [_log_file(db, schema, redact_url(url), since, True, frozenset(COLUMNS["requests"]))]
        _views(db)  # in pg_temp, which PostgreSQL searches before the tables' schema
        yield db
    finally:
        if not db.broken:
            db.rollback()  # nothing was written but the temporary views, which go with the session
        db.close()


def _log_file(db, schema: str, path, since: float, summary: bool, columns: frozenset[str]) -> LogFile:
    """One file (or a PostgreSQL schema) of the log, with the first request and answer ids of the range."""
    req_lo = first_id(db, f"{schema}.requests", since) if since > 0 else 0
    ans_lo = first_answer_id(db, schema, req_lo) if req_lo > 0 else 0
    return LogFile(schema, path, req_lo, ans_lo, summary, columns)


def _views(db) -> None:
    """The `requests` and `answers` views over every file's rows of the range."""
    parts: dict[str, list[str]] = {"requests": [], "answers": []}
    for f in db.files:
        selected = ", ".join(c if c in f.columns else f"NULL AS {c}" for c in COLUMNS["requests"])
        parts["requests"].append(f"SELECT {selected} FROM {f.schema}.requests "
                                 f"WHERE id >= {int(f.first_request)} AND ts >= {float(db.since)!r}")
        parts["answers"].append(f"SELECT {', '.join(COLUMNS['answers'])} FROM {f.schema}.answers "
                                f"WHERE id >= {int(f.first_answer)}")
    for table, selects in parts.items():
        db.execute(f"CREATE TEMP VIEW {table} AS {' UNION ALL '.join(selects)}")


# ---------------------------------------------------------------------------------------------- the summary

HOUR = 3600
BY_HOUR = "hour"  # a facet's time bucket as the hour number (unix time // 3600), for callers that group it further
HOURLY, DAILY = "%Y-%m-%d %H:00", "%Y-%m-%d"  # the charts' buckets (UTC)


def _bucket_namer(fmt: str):
    """hour number (HOURLY) or day number (DAILY) -> its strftime name, each computed once."""
    seconds = HOUR if fmt == HOURLY else 24 * HOUR
    return functools.lru_cache(maxsize=None)(lambda n: time.strftime(fmt, time.gmtime(int(n) * seconds)))


def _windows(f: LogFile, since: float, now: float, raw_only: bool):
    """(summary hours [h0, h1) or None, raw time windows [(from, to or None)]) of one file for a range."""
    h0, h1 = -(-int(since) // HOUR) if since > 0 else 0, int(now // HOUR)
    if not f.summary or raw_only or h0 >= h1:
        return None, [(since, None)]
    return (h0, h1), [(since, h0 * HOUR), (h1 * HOUR, None)]


def _id_window(db: sqlite3.Connection, f: LogFile, t0: float, t1: float | None) -> tuple[int, int]:
    """Request ids [first, end) of a file holding every row with ts in [t0, t1)."""
    first = max(f.first_request, first_id(db, f"{f.schema}.requests", t0) if t0 > 0 else 0)
    if t1 is None:
        return first, db.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {f.schema}.requests").fetchone()[0]
    return first, first_id(db, f"{f.schema}.requests", t1 + 2 * SLACK_S)


def facets(db: LogConnection, wanted: dict[str, str | None], *, now: float, raw_only: bool = False,
           where: dict[str, str] | None = None) -> dict[str, dict[tuple, list]]:
    """The summary's figures of the range `open_log` was given, summed over the log's files: per facet
    (serving.core.log_tables.FACETS) {(time bucket, d1, d2, d3): [n, s1, s2, s3, s4, s5, lo, hi]}.

    `wanted` maps each facet to its time bucket: `HOURLY` or `DAILY` (the bucket's name, UTC), `BY_HOUR` for the
    hour number, or None for no time (the bucket is then ''). `where` maps a facet to a condition on its
    dimensions (d1, d2, d3), e.g. {"answer": "d2 = 'explore'"}: only those rows are summed (a month of hours
    grouped is slow to sort).
    Whole hours of the range come from each file's summary, the partial hours at its edges (and every hour of a
    file without a summary, or with `raw_only`) from its rows, through the same SQL the writer used
    (`facet_sql`): the sums are those of the rows."""
    d = db.dialect
    unknown = [f for f in wanted.values() if f not in (BY_HOUR, HOURLY, DAILY, None)]
    if unknown:
        raise ValueError(f"time buckets {unknown}: give BY_HOUR, HOURLY, DAILY or None")
    sums = ", ".join(f"SUM({m})" for m in MEASURES[:6])
    out: dict[str, dict[tuple, list]] = {name: {} for name in wanted}
    for f in db.files:
        hours, windows = _windows(f, db.since, now, raw_only)
        spans = [_id_window(db, f, t0, t1) + (t0, t1) for t0, t1 in windows if t1 is None or t0 < t1]
        for name, fmt in wanted.items():
            # Hours and days are grouped as integers and named once per group: strftime on every summary row
            # (a month of latency histograms is ~10^5 rows) costs more than the rest of the query.
            hours_per = 24 if fmt == DAILY else 1
            name_of = _bucket_namer(fmt) if fmt in (HOURLY, DAILY) else None
            g = f"hour / {hours_per}" if fmt else "''"
            by = "1, 2, 3, 4" if fmt else "d1, d2, d3"  # without time: the summary's key order, no sort
            cond = f"({(where or {})[name]})" if name in (where or {}) else "TRUE"
            readable = NEEDS.get(name, "id") in f.columns  # a file older than the facet's column has none of it
            sources = [facet_sql(name, f.schema, window=w, dialect=d) for w in spans if w[0] < w[1] and readable]
            queries = [f"SELECT {g}, d1, d2, d3, {sums}, MIN(lo), MAX(hi) FROM ({s}) AS w WHERE {cond} "
                       f"GROUP BY {by}" for s in sources]
            if hours is not None:
                queries.append(f"SELECT {g}, d1, d2, d3, {sums}, MIN(lo), MAX(hi) FROM {f.schema}.summary WHERE "
                               f"facet = '{name}' AND hour >= {hours[0]} AND hour < {hours[1]} AND {cond} "
                               f"GROUP BY {by}")
            acc = out[name]
            for q in queries:
                for row in db.execute(q):
                    key, values = tuple(row[:4]), list(row[4:])
                    if d is not SQLITE:  # PostgreSQL's dimensions are text
                        key = (key[0], *typed_dims(name, key[1:]))
                    if name_of is not None:
                        key = (name_of(key[0]), *key[1:])
                    have = acc.get(key)
                    if have is None:
                        acc[key] = values
                        continue
                    for i in range(6):
                        have[i] += values[i]
                    have[6], have[7] = min(have[6], values[6]), max(have[7], values[7])
    return out
