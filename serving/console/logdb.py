"""The decision log opened read-only as one SQL database: every file (rotated ones too) behind two views.

    with open_log("runs/gateway/log") as db:                 # data/logged.py names the files
        db.execute("SELECT COUNT(*) FROM requests WHERE ts >= ?", (since,)).fetchone()

The views `requests` and `answers` are `UNION ALL`s over each file's own tables, so every query runs in SQLite
(each file's indexes serve lookups by request id) and nothing loads the whole log into Python. The files are
attached read-only (`mode=ro`): the console and `switchcraft traffic report` never write the gateway's log.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from data.logged import FILE, log_files

RANGES = {"1h": 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400, "all": None}
DEFAULT_RANGE = "7d"
COLUMNS = {"requests": ("id", "ts", "request_id", "key_id", "router_version", "kind", "status", "example_id",
                        "routed", "chosen", "rule", "strategy", "verdict", "kinds", "answered_by", "cost_usd",
                        "latency_ms", "stream", "request"),
           "answers": ("id", "request_id", "model", "role", "outcome", "latency_ms", "cost_usd", "input_tokens",
                       "output_tokens", "calls", "raw", "decoder", "decode_error")}


def since_of(range_name: str, now: float | None = None) -> float:
    """The first timestamp a range covers (0 for `all`); ValueError naming the known ranges."""
    if range_name not in RANGES:
        raise ValueError(f"range {range_name!r}: give one of {', '.join(RANGES)}")
    span = RANGES[range_name]
    return 0.0 if span is None else (time.time() if now is None else now) - span


@contextmanager
def open_log(folder: str | Path) -> Iterator[sqlite3.Connection]:
    """A connection whose `requests` and `answers` views span every file of the log (FileNotFoundError when the
    folder holds none). SQLite attaches at most 10 files by default: more than the log keeps (`log.keep`)."""
    files = log_files(folder)
    if not files:
        raise FileNotFoundError(f"{folder}: no decision log ({FILE}); serve with log.path={folder} first")
    db = sqlite3.connect(":memory:", uri=True, check_same_thread=False)
    db.row_factory = sqlite3.Row
    try:
        for i, path in enumerate(files):
            db.execute(f"ATTACH DATABASE ? AS f{i}", (f"file:{quote(str(Path(path).resolve()))}?mode=ro",))
        for table, cols in COLUMNS.items():
            names = ", ".join(cols)
            union = " UNION ALL ".join(f"SELECT {names} FROM f{i}.{table}" for i in range(len(files)))
            db.execute(f"CREATE TEMP VIEW {table} AS {union}")
        yield db
    finally:
        db.close()
