"""The gateway's decision log read back as the offline pipeline's own contracts.

    requests, answers = read_log("runs/gateway/log")            # every file, oldest first, as dicts
    requests, answers = read_log("postgresql://learn@db:5432/switchcraft")   # a fleet's log (log.url)
    examples, outputs = log_contracts(requests, answers, pool)  # Examples (no expected answer) and Outputs
    rows = complete_rows(examples, outputs, pool)               # the requests every pool model answered

The log itself (its two tables, rotation, pruning, the writers) is serving/core/decision_log.py; this module only
reads what it leaves, SQLite files or a PostgreSQL database, so `switchcraft learn` and anything else offline need
nothing from serving. Both give the same dicts: the same columns, in the same order, with the same Python types.
"""

from __future__ import annotations

import json
import re
import sqlite3
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
    files = log_files(folder)
    if not files:
        raise FileNotFoundError(f"{folder}: no decision log ({FILE}); serve with log.path={folder} first")
    requests, answers = [], []
    for path in files:
        db = sqlite3.connect(path)
        db.row_factory = sqlite3.Row
        requests += [dict(r) for r in db.execute("SELECT * FROM requests ORDER BY id")]
        answers += [dict(r) for r in db.execute("SELECT * FROM answers ORDER BY id")]
        db.close()
    return requests, answers


def _read_postgres(url: str) -> tuple[list[dict], list[dict]]:
    import psycopg
    from psycopg.rows import dict_row

    try:
        with psycopg.connect(url, row_factory=dict_row, connect_timeout=10) as db:
            db.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # both tables from one snapshot
            if db.execute("SELECT to_regclass('requests')").fetchone()["to_regclass"] is None:
                raise FileNotFoundError(f"{redact_url(url)}: no decision log there (no requests table); serve "
                                        f"with log.url={redact_url(url)} first")
            requests = db.execute("SELECT * FROM requests ORDER BY id").fetchall()
            answers = db.execute("SELECT * FROM answers ORDER BY id").fetchall()
    except psycopg.Error as e:
        raise DataError(f"{redact_url(url)}: the decision log cannot be read: {str(e).strip()}",
                        hint="check the URL, that the server is up and this user may read the log's tables") from None
    return requests, answers


def log_contracts(requests: list[dict], answers: list[dict], pool: Pool) -> tuple[list[Example], list[Output]]:
    """Examples (one per logged request with its text) and outputs (one per logged answer of a pool model)."""
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
    if not examples:
        raise DataError("the decision log holds no request text", hint="serve with log.requests: true (and "
                        "explore.rate > 0, so every pool model answers some requests), then learn again")
    ids, outputs, have = {e.id for e in examples}, [], set()
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
    return examples, outputs


def complete_rows(examples: list[Example], outputs: list[Output], pool: Pool) -> list[Example]:
    """The requests every pool model answered (what the router and the strategy policy are fitted on)."""
    by = {}
    for o in outputs:
        by.setdefault(o.example_id, set()).add(o.model)
    return [e for e in examples if by.get(e.id, set()) >= set(pool.names)]
