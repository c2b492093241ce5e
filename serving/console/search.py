"""The Requests view's search and pages, and a request's timeline (serving/console/views.py).

    with open_log("runs/gateway/log", since) as db:
        page = search_requests(db, since=since, q="get_weather", explored=True, cost_above=0.01, page=0)
        t = timeline(trace(db, request_id))

Newest first, `PAGE_SIZE` a page: each file of the log read backwards from its newest row (newest file first)
until the page's last row and one more (whether a next page exists) match; nothing counts or sorts the log.
`q` matches a request id (whole or its start), the caller's `metadata.example_id`, or text contained in the
logged request (only with `log.requests: true`: otherwise the log holds none).
"""

from __future__ import annotations

import json
from typing import Any

from serving.console.logdb import LogConnection
from serving.console.queries import SERVED

PAGE_SIZE = 50
COLUMNS = ("ts, request_id, key_id, router_version, status, chosen, rule, strategy, verdict, answered_by, cost_usd, "
           "latency_ms, stream, example_id, {replica}")


def search_requests(db: LogConnection, *, since: float, page: int = 0, size: int = PAGE_SIZE, q: str | None = None,
                    key: str | None = None, model: str | None = None, strategy: str | None = None,
                    status: int | None = None, explored: bool | None = None, cost_above: float | None = None,
                    latency_above: float | None = None) -> dict[str, Any]:
    """{rows, page, size, more}: page `page` (0: the newest) of the requests matching every filter given."""
    where, params = [SERVED], [since]
    for column, value in (("key_id", key), ("answered_by", model), ("strategy", strategy), ("status", status)):
        if value not in (None, ""):
            where.append(f"{column} = ?")
            params.append(value)
    if cost_above is not None:
        where.append("cost_usd > ?")
        params.append(cost_above)
    if latency_above is not None:
        where.append("latency_ms > ?")
        params.append(latency_above)
    if q:
        where.append("(request_id = ? OR substr(request_id, 1, ?) = ? OR example_id = ? OR "
                     f"(request IS NOT NULL AND {db.dialect.contains('request', '?')}))")
        params += [q, len(q), q, q, q]
    wanted, rows = (page + 1) * size + 1, []
    for f in reversed(db.files):
        if len(rows) >= wanted:
            break
        clauses = list(where)
        if explored is not None:
            clauses.append(f"{'' if explored else 'NOT '}EXISTS (SELECT 1 FROM {f.schema}.answers x WHERE "
                           "x.request_id = r.request_id AND x.role = 'explore')")
        columns = COLUMNS.format(replica="replica" if "replica" in f.columns else "NULL AS replica")
        rows += [dict(r) for r in db.execute(
            f"SELECT {columns} FROM {f.schema}.requests r WHERE id >= ? AND {' AND '.join(clauses)} "
            "ORDER BY id DESC LIMIT ?", (f.first_request, *params, wanted - len(rows)))]
    return {"rows": rows[page * size: (page + 1) * size], "page": page, "size": size, "more": len(rows) >= wanted}


def timeline(t: dict[str, Any]) -> dict[str, Any]:
    """The upstream calls of a trace (queries.trace) in time order, with when each started relative to the
    request, the answer returned marked, and identical answers grouped.

    The log keeps each call's duration, not its start: the start is inferred from its role (first answers go
    out together at 0; a tie-breaker or an escalation after the slowest first answer; a fallback after the calls
    before it; exploration after the reply, at the request's own latency)."""
    req, calls, clock = t["request"], [], 0.0
    firsts = [a for a in t["answers"] if a["role"] == "first"]
    after_first = max((a["latency_ms"] or 0.0 for a in firsts), default=0.0)
    for a in t["answers"]:
        ms = a["latency_ms"] or 0.0
        if a["role"] == "first":
            start = 0.0
        elif a["role"] in ("tie_breaker", "escalate"):
            start = after_first
        elif a["role"] == "explore":
            start = req["latency_ms"] or clock
        else:  # a fallback: after what was tried before it
            start = clock
        clock = max(clock, start + ms)
        calls.append({**a, "start_ms": start})
    returned = None
    for c in calls:
        if c["role"] != "explore" and c["outcome"] == "ok" and c["model"] == req["answered_by"]:
            returned = c
    if returned is not None:
        returned["returned"] = True
    groups: dict[str, dict] = {}
    for c in calls:
        if c["outcome"] != "ok" or c["calls"] is None:
            continue
        text = json.dumps(c["calls"], sort_keys=True)
        g = groups.setdefault(text, {"calls": c["calls"], "count": 0, "models": [], "returned": False})
        g["count"] += 1
        g["models"].append(c["model"])
        g["returned"] = g["returned"] or bool(c.get("returned"))
    ranked = sorted(groups.values(), key=lambda g: (not g["returned"], -g["count"]))
    return {"calls": sorted(calls, key=lambda c: c["start_ms"]), "answers": ranked}
