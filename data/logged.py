"""The gateway's decision log read back as the offline pipeline's own contracts.

    requests, answers = read_log("runs/gateway/log")            # every file, oldest first, as dicts
    requests, answers = read_log("postgresql://learn@db:5432/switchcraft")   # a fleet's log (log.url)
    examples, outputs = log_contracts(requests, answers, pool)  # Examples (no expected answer) and Outputs
    rows = complete_rows(examples, outputs, pool)               # the requests every pool model answered
    part = read_explored("runs/gateway/log", pool.names)        # the same, keeping only what learning needs

`read_log` holds the whole log in memory; `read_explored` (what `switchcraft learn` calls) keeps only the rows of
the requests that every pool model answered (the explored ones) and counts the rest in SQL, so its memory grows
with the explored requests, not with the log. Both read SQLite files or a PostgreSQL database (`log.url`: every
replica's rows) and give the same dicts: the same columns, in the same order, with the same Python types.
The log itself (its two tables, rotation, pruning, the writers) is serving/core/decision_log.py; this module only
reads what it leaves, so `switchcraft learn` and anything else offline need nothing from serving.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from data.errors import DataError
from data.pool import Pool
from data.schema import Call, Example, Expected, Message, Output, Tool, Usage

FILE = "decisions.sqlite"  # the log's current file; rotated ones are decisions.<unix ms>.sqlite
# Several workers (`switchcraft serve --workers N`) each write their own: worker slot k decisions-<k>.sqlite, rotated
# decisions-<k>.<unix ms>.sqlite. Every file of the folder is one log.
NAME = re.compile(r"decisions(?:-(?P<slot>[0-9]+))?(?:\.(?P<ms>[0-9]+))?\.sqlite")


def file_name(slot: int | None = None, ms: int | None = None) -> str:
    """A log file's name: a lone process's (`slot` None) or a worker slot's, current (`ms` None) or rotated."""
    return "decisions" + ("" if slot is None else f"-{slot}") + ("" if ms is None else f".{ms}") + ".sqlite"


SCHEMES = ("postgresql://", "postgres://")  # a decision log in PostgreSQL (log.url)


def is_log_url(source: str | Path) -> bool:
    """Whether a log source names a PostgreSQL database (else it is a folder or file of SQLite logs)."""
    return isinstance(source, str) and source.startswith(SCHEMES)


def redact_url(url: str) -> str:
    """The URL without its password, for messages and records."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


def log_files(folder: str | Path) -> list[Path]:
    """The log's files, oldest first: rotated ones by their time (every writer's), then the current ones."""
    folder = Path(folder)
    if folder.is_file():
        return [folder]
    named = [(m, p) for p in folder.glob("decisions*.sqlite") if (m := NAME.fullmatch(p.name))]
    rotated = sorted((int(m["ms"]), p.name, p) for m, p in named if m["ms"] is not None)
    current = sorted((-1 if m["slot"] is None else int(m["slot"]), p) for m, p in named if m["ms"] is None)
    return [p for *_, p in rotated] + [p for _, p in current]


def read_log(folder: str | Path) -> tuple[list[dict], list[dict]]:
    """(requests, answers) of every file of the log, oldest first, as dicts (JSON fields still strings); `folder`
    may be a PostgreSQL URL (every replica's rows)."""
    if is_log_url(folder):
        return _read_postgres(str(folder))
    requests, answers = [], []
    for path in _files(folder):
        db = sqlite3.connect(path)
        db.row_factory = sqlite3.Row
        requests += [dict(r) for r in db.execute("SELECT * FROM requests ORDER BY id")]
        answers += [dict(r) for r in db.execute("SELECT * FROM answers ORDER BY id")]
        db.close()
    return requests, answers


def _read_postgres(url: str) -> tuple[list[dict], list[dict]]:
    with _postgres(url) as db:
        return (db.execute("SELECT * FROM requests ORDER BY id").fetchall(),
                db.execute("SELECT * FROM answers ORDER BY id").fetchall())


@contextmanager
def _postgres(url: str) -> Iterator:
    """A connection to a PostgreSQL log reading one snapshot (dict rows); a clear error where there is none."""
    import psycopg
    from psycopg.rows import dict_row

    try:
        with psycopg.connect(url, row_factory=dict_row, connect_timeout=10) as db:
            db.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # every query from one snapshot
            if db.execute("SELECT to_regclass('requests')").fetchone()["to_regclass"] is None:
                raise FileNotFoundError(f"{redact_url(url)}: no decision log there (no requests table); serve "
                                        f"with log.url={redact_url(url)} first")
            yield db
    except psycopg.Error as e:
        raise DataError(f"{redact_url(url)}: the decision log cannot be read: {str(e).strip()}",
                        hint="check the URL, that the server is up and this user may read the log's tables") from None


def _files(folder: str | Path) -> list[Path]:
    files = log_files(folder)
    if not files:
        raise FileNotFoundError(f"{folder}: no decision log ({FILE}); serve with log.path={folder} first")
    return files


# A request the examples count: served, with its text, answered (what log_contracts keeps).
LOGGED = "kind = 'served' AND request IS NOT NULL AND request <> '' AND status = 200"
SCRATCH = """
CREATE TABLE pool (model TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE answered (request_id TEXT NOT NULL, model TEXT NOT NULL);
CREATE TABLE logged (request_id TEXT NOT NULL, ts REAL);
"""
# The explored requests (every pool model answered, served with text), newest first; the window keeps the first N.
COMPLETE = ("SELECT request_id FROM answered GROUP BY request_id HAVING COUNT(DISTINCT model) >= :n")
EXPLORED = (f"SELECT request_id FROM logged WHERE request_id IN ({COMPLETE}) GROUP BY request_id "
            "ORDER BY MIN(ts) DESC, request_id DESC")


@dataclass
class ExploredLog:
    """What learning needs of a log: the rows (as `read_log` gives them) of the requests that every pool model
    answered (the newest `max_explored` of them), and counts of the rest."""

    requests: list[dict]
    answers: list[dict]
    logged: int  # served requests with their text (distinct ids): the examples a whole read makes
    rows: int  # request rows of every file
    explored: int  # logged requests every pool model answered, before the window


def read_explored(folder: str | Path, models: Sequence[str], scratch: str | Path | None = None,
                  max_explored: int | None = None) -> ExploredLog:
    """The rows of the log's requests that every one of `models` answered (`outcome` ok, over every file: the
    requests `complete_rows` keeps, the same rows `read_log` holds for them, in its order), only the newest
    `max_explored` of them where given (by their first logged time), and counts of the others. SQLite does the
    work: each file is scanned once into a scratch database on disk (`scratch`, a folder; default a temporary one),
    whose sorts find the explored requests; a cursor streams their rows. Memory grows with the explored requests
    kept (at most `max_explored`), not with the log (the scratch file does: ~60 bytes an answer). `folder` may be
    a PostgreSQL URL: the server finds the explored requests in place."""
    if max_explored is not None and max_explored < 1:
        raise DataError(f"max_explored {max_explored}: give at least 1 (or none: every explored request)",
                        field="max_explored")
    if is_log_url(folder):
        return _explored_postgres(str(folder), models, max_explored)
    files = _files(folder)
    with tempfile.TemporaryDirectory(prefix="explored-", dir=scratch) as tmp:
        db = sqlite3.connect(Path(tmp) / "scratch.sqlite", isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            db.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA temp_store = FILE;"
                             + SCRATCH)
            db.executemany("INSERT OR IGNORE INTO pool VALUES (?)", ((m,) for m in models))
            rows = 0
            for path in files:
                with _attached(db, path):
                    db.execute("INSERT INTO answered SELECT request_id, model FROM log.answers "
                               "WHERE outcome = 'ok' AND model IN pool")
                    db.execute(f"INSERT INTO logged SELECT request_id, ts FROM log.requests WHERE {LOGGED}")
                    rows += db.execute("SELECT COUNT(*) FROM log.requests").fetchone()[0]
            db.execute(f"CREATE TABLE explored AS {EXPLORED}", {"n": len(set(models))})  # newest first, by rowid
            db.execute("CREATE TABLE wanted (request_id TEXT PRIMARY KEY) WITHOUT ROWID")
            db.execute("INSERT INTO wanted SELECT request_id FROM explored ORDER BY rowid LIMIT ?",
                       (-1 if max_explored is None else max_explored,))
            logged = db.execute("SELECT COUNT(DISTINCT request_id) FROM logged").fetchone()[0]
            explored = db.execute("SELECT COUNT(*) FROM explored").fetchone()[0]
            requests, answers = [], []
            for path in files:
                with _attached(db, path):
                    for table, into in (("requests", requests), ("answers", answers)):
                        cursor = db.execute(f"SELECT * FROM log.{table} WHERE request_id IN wanted ORDER BY id")
                        into.extend(dict(r) for r in cursor)
        finally:
            db.close()
    return ExploredLog(requests, answers, logged, rows, explored)


def _explored_postgres(url: str, models: Sequence[str], max_explored: int | None) -> ExploredLog:
    complete = ("SELECT request_id FROM answers WHERE outcome = 'ok' AND model = ANY(%(pool)s) GROUP BY request_id "
                "HAVING COUNT(DISTINCT model) >= %(n)s")
    explored = (f"SELECT request_id, MIN(ts) AS first FROM requests WHERE {LOGGED} AND request_id IN ({complete}) "
                "GROUP BY request_id")
    args = {"pool": sorted(set(models)), "n": len(set(models)), "limit": max_explored}
    with _postgres(url) as db:
        rows = db.execute("SELECT COUNT(*) AS n FROM requests").fetchone()["n"]
        logged = db.execute(f"SELECT COUNT(DISTINCT request_id) AS n FROM requests WHERE {LOGGED}").fetchone()["n"]
        # The window's ids and how many were explored in all, from one pass (the window at most holds the ids).
        kept = db.execute(f"SELECT request_id, COUNT(*) OVER () AS total FROM ({explored}) e "
                          "ORDER BY first DESC, request_id DESC LIMIT %(limit)s", args).fetchall()
        ids = [k["request_id"] for k in kept]
        requests, answers = (db.execute(f"SELECT * FROM {table} WHERE request_id = ANY(%(ids)s) ORDER BY id",
                                        {"ids": ids}).fetchall() for table in ("requests", "answers"))
    return ExploredLog(requests, answers, logged, rows, kept[0]["total"] if kept else 0)


@contextmanager
def _attached(db: sqlite3.Connection, path: Path) -> Iterator[None]:
    """One log file attached to `db` as `log` while inside."""
    attached = False
    try:
        db.execute("ATTACH DATABASE ? AS log", (str(path),))
        attached = True
        yield
    except sqlite3.DatabaseError as e:
        raise DataError(f"not a readable decision log file: {e}", path=path,
                        hint="the log folder holds only what the gateway's log writer leaves") from e
    finally:
        if attached:
            db.execute("DETACH DATABASE log")


def log_contracts(requests: list[dict], answers: list[dict], pool: Pool) -> tuple[list[Example], list[Output]]:
    """Examples (one per logged request with its text) and outputs (one per logged answer of a pool model)."""
    examples = _examples(requests)
    if not examples:
        raise no_text()
    return examples, _outputs(answers, {e.id for e in examples}, pool)


def explored_contracts(part: ExploredLog, pool: Pool) -> tuple[list[Example], list[Output]]:
    """`log_contracts` of what `read_explored` kept: the same examples and outputs as the whole log's for those
    requests (none when the log holds text but no request may be complete)."""
    if not part.logged:
        raise no_text()
    examples = _examples(part.requests)
    return examples, _outputs(part.answers, {e.id for e in examples}, pool)


def no_text() -> DataError:
    return DataError("the decision log holds no request text", hint="serve with log.requests: true (and "
                     "explore.rate > 0, so every pool model answers some requests), then learn again")


def _examples(requests: list[dict]) -> list[Example]:
    examples, seen = [], set()
    for r in requests:
        if r["kind"] != "served" or not r["request"] or r["status"] != 200 or r["request_id"] in seen:
            continue
        seen.add(r["request_id"])
        req = json.loads(r["request"])
        examples.append(Example(
            id=f"log:{r['request_id']}", source="log", category="logged",
            messages=[Message.model_validate(m) for m in req["messages"]],
            tools=[Tool.model_validate(t) for t in req["tools"]], expected=Expected.anything(),
            meta={"expected_unknown": True, "ts": r["ts"], "example_id": r["example_id"],
                  "answered_by": r["answered_by"], "cost_usd": r["cost_usd"], "router_version": r["router_version"]}))
    return examples


def _outputs(answers: list[dict], ids: set[str], pool: Pool) -> list[Output]:
    outputs, have = [], set()
    for a in answers:
        eid = f"log:{a['request_id']}"
        if eid not in ids or a["outcome"] != "ok" or a["model"] not in pool.names or (eid, a["model"]) in have:
            continue
        have.add((eid, a["model"]))
        calls = [Call(name=c["name"], arguments=c.get("arguments") or {}) for c in json.loads(a["calls"] or "[]")]
        raw = json.loads(a["raw"]) if a["raw"] else ""
        outputs.append(Output(example_id=eid, model=a["model"], raw=raw, calls=calls or None,
                              decode_error=None if calls else (a["decode_error"] or "no_call: no tool call"),
                              decoder=a["decoder"], usage=Usage(input_tokens=a["input_tokens"],
                                                                output_tokens=a["output_tokens"]),
                              latency_s=(a["latency_ms"] or 0) / 1e3))
    return outputs


def complete_rows(examples: list[Example], outputs: list[Output], pool: Pool) -> list[Example]:
    """The requests every pool model answered (what the router and the strategy policy are fitted on)."""
    by = {}
    for o in outputs:
        by.setdefault(o.example_id, set()).add(o.model)
    return [e for e in examples if by.get(e.id, set()) >= set(pool.names)]
