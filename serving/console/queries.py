"""The console's numbers, as SQL over the decision log (serving/console/logdb.py) and the spend ledger.

    with open_log("runs/gateway/log") as db:
        s = savings(db, pool, since=since_of("7d"), reference="gpt-4o-2024-05-13")
        t = traffic(db, since=0.0)
        c = cascades(db, since=0.0)
        tr = trace(db, request_id)

One implementation for the browser (serving/console/views.py) and `switchcraft traffic report`
(serving/console/report.py). Every function returns plain dicts of numbers (JSON-ready); none loads the log into
Python: aggregates, latency histograms (`quantiles`) and filters run in the database (SQLite, or PostgreSQL for a
fleet's log), on views that `open_log(source, since)` already restricted to the range.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import time
from typing import Any

from data.pool import Pool
from serving.console.logdb import BY_HOUR, HOUR, LogConnection, facets
from serving.core.log_sql import dialect_of
from serving.core.log_tables import LATENCY_BUCKETS_PER_E, latency_bucket
from serving.core.state import utc_day

SERVED = "kind = 'served' AND ts >= ?"


def bucket_of(since: float, now: float) -> str:
    """SQLite's strftime format of a chart's buckets: hours over a day or less, else days (UTC)."""
    return "%Y-%m-%d %H:00" if since and now - since <= 86400 + 1 else "%Y-%m-%d"


BUCKETS_PER_E = LATENCY_BUCKETS_PER_E  # buckets of ln(1 + ms) / 40, about 2.5% wide (P50/P99 within ±1.3%)


def histograms(db: sqlite3.Connection, source: str, params: tuple = (), by: str = "''"
               ) -> dict[str, list[tuple[int, int]]]:
    """Per group `by`, the latency histogram over `FROM … WHERE …` (`source`: rows with a `latency_ms`), counted
    by SQLite in one scan: (bucket, rows), buckets of ln(1 + ms) × BUCKETS_PER_E."""
    hist: dict[str, list[tuple[int, int]]] = {}
    bucket = latency_bucket(dialect_of(db), "latency_ms")
    for group, b, n in db.execute(f"SELECT {by}, {bucket} AS b, COUNT(*) {source} AND latency_ms IS NOT NULL "
                                  "GROUP BY 1, 2 ORDER BY 1, 2", params):
        hist.setdefault(str(group), []).append((b, n))
    return hist


def quantile_of(buckets: list[tuple[int, int]], q: float) -> float | None:
    """The q-quantile (nearest rank) of a histogram: its bucket's centre, in ms."""
    total, seen = sum(n for _, n in buckets), 0
    rank = max(1, math.ceil(q * total))
    for b, n in sorted(buckets):
        seen += n
        if seen >= rank:
            return math.exp((b + 0.5) / BUCKETS_PER_E) - 1
    return None


def quantiles(db: sqlite3.Connection, source: str, params: tuple = (), by: str = "''",
              qs: tuple[float, ...] = (0.5, 0.99)) -> dict[str, dict[float, float | None]]:
    """Latency quantiles per group `by` over `source`, from one histogram scan (`histograms`)."""
    return {g: {q: quantile_of(h, q) for q in qs} for g, h in histograms(db, source, params, by).items()}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of k successes in n trials ((0, 1) when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


def rate(k: int, n: int) -> dict[str, Any]:
    low, high = wilson(k, n)
    return {"k": k, "n": n, "mean": k / n if n else None, "low": low, "high": high}


# ------------------------------------------------------------------------------------------------- savings

def _none(v):
    return None if v == "" else v


def reference_cost(pool: Pool, answers: dict[tuple, list], reference: str) -> dict[str, Any]:
    """How a request is priced as if `reference` had answered it: its price, and its typical output tokens
    (the mean over its logged answers; without any, over every model's: the estimate says which). `answers`:
    the range's `answer` facet (serving/console/logdb.py `facets`)."""
    model = pool.get(reference)  # KeyError naming the pool's models
    ok = [(k[1], v) for k, v in answers.items() if k[3] == "ok"]
    mine = [v for m, v in ok if m == reference]
    tokens, counted = sum(v[2] for v in mine), sum(v[3] for v in mine)
    latency_n = sum(v[5] for v in mine)
    latency_ms = sum(v[4] for v in mine) / latency_n if latency_n else None
    source = f"mean of {counted} logged answers of {reference}"
    out_tokens = tokens / counted if counted else None
    if not counted:
        tokens, counted = sum(v[2] for _, v in ok), sum(v[3] for _, v in ok)
        out_tokens = tokens / counted if counted else 0.0
        source = f"mean of {counted} logged answers of every model ({reference} has none)"
    p = model.prices
    return {"model": reference, "kind": p.kind, "input_per_mtok": p.input_per_mtok, "output_per_mtok":
            p.output_per_mtok, "usd_per_query": p.usd_per_query, "gpu_usd_per_hour": p.gpu_usd_per_hour,
            "seconds_per_query": p.gpu_seconds_per_query or ((latency_ms or 0.0) / 1e3),
            "output_tokens": float(out_tokens or 0.0), "output_source": source}


def counterfactual_usd(ref: dict[str, Any], requests: int, input_tokens: float) -> float:
    """What `requests` requests with `input_tokens` input tokens in all would have cost at the reference."""
    if ref["kind"] == "query":
        return requests * ref["usd_per_query"]
    if ref["kind"] == "gpu_time":
        return requests * ref["seconds_per_query"] * ref["gpu_usd_per_hour"] / 3600
    return (input_tokens * ref["input_per_mtok"] + requests * ref["output_tokens"] * ref["output_per_mtok"]) / 1e6


def savings(db: LogConnection, pool: Pool, *, since: float, now: float, reference: str,
            raw_only: bool = False) -> dict[str, Any]:
    """Spend of the answered requests vs the estimate of sending each to `reference`, per day (or hour), per key
    and per hour (`per_hour`, with exploration's spend: serving/console/headline.py resamples it); exploration's
    spend apart (`explore_usd`). The headline (net of exploration, the reference rule, flags) is headline.py's.

    A request's input tokens are those its first answer reported (the log's `input_tokens`); a request without
    any (no usage came back) counts at the mean of the others."""
    hourly = "%Y-%m-%d %H:00"
    f = facets(db, {"key": BY_HOUR, "answer": None}, now=now, raw_only=raw_only)
    explored = facets(db, {"answer": BY_HOUR}, now=now, raw_only=raw_only, where={"answer": "d2 = 'explore'"})
    label = functools.lru_cache(maxsize=None)(lambda h: time.strftime(hourly, time.gmtime(int(h) * HOUR)))
    explore_hour: dict[str, float] = {}
    for (hour, _model, _role, _outcome), v in explored["answer"].items():
        explore_hour[label(hour)] = explore_hour.get(label(hour), 0.0) + v[1]
    ref = reference_cost(pool, f["answer"], reference)
    day = bucket_of(since, now) != hourly
    groups: dict[str, dict[str, dict]] = {"per_day": {}, "per_key": {}, "per_hour": {}}
    for (h, key, status, _), (n, spent, t, nt, *_rest) in f["key"].items():
        if status != 200:
            continue
        hour = label(h)
        for name, g in (("per_day", hour[:10] if day else hour), ("per_key", key), ("per_hour", hour)):
            r = groups[name].setdefault(g, {"group": g, "requests": 0, "spent_usd": 0.0, "input_tokens": 0,
                                            "with_tokens": 0})
            r["requests"] += n
            r["spent_usd"] += spent
            r["input_tokens"] += t
            r["with_tokens"] += nt
    groups = {name: [rows[g] for g in sorted(rows)] for name, rows in groups.items()}
    known = sum(r["input_tokens"] for r in groups["per_day"])
    counted = sum(r["with_tokens"] for r in groups["per_day"])
    mean_in = known / counted if counted else 0.0
    for rows in groups.values():
        for r in rows:
            filled = r["input_tokens"] + mean_in * (r["requests"] - r["with_tokens"])
            r["reference_usd"] = counterfactual_usd(ref, r["requests"], filled)
            r["saved_usd"] = r["reference_usd"] - r["spent_usd"]
    for r in groups["per_hour"]:
        r["explore_usd"] = explore_hour.get(r["group"], 0.0)
    explore = [v for k, v in f["answer"].items() if k[2] == "explore"]
    spent = sum(r["spent_usd"] for r in groups["per_day"])
    counter = sum(r["reference_usd"] for r in groups["per_day"])
    n = sum(r["requests"] for r in groups["per_day"])
    return {"reference": ref, **groups, "requests": n, "without_tokens": n - counted, "spent_usd": spent,
            "reference_usd": counter, "saved_usd": counter - spent, "explore_usd": sum(v[1] for v in explore),
            "explore_calls": sum(v[0] for v in explore), "saved_share": (counter - spent) / counter if counter
            else None, "models": pool.names}


# ------------------------------------------------------------------------------------------------- traffic

def traffic(db: LogConnection, *, since: float, now: float, raw_only: bool = False) -> dict[str, Any]:
    """Requests over time, by status, strategy and answering model; latency P50/P99 of whole requests and of the
    gateway's own part of them (overall and per time bucket) and of upstream calls (per model); errors by status
    and failed calls by outcome; spend per model (exploration's part apart) and per key and time bucket (the
    log's view of the range)."""
    bucket = bucket_of(since, now)
    f = facets(db, {"key": bucket, "mix": None, "rlat": bucket, "olat": bucket, "alat": None, "answer": None},
               now=now, raw_only=raw_only)
    times: dict[str, list[int]] = {}
    key_spend_: dict[tuple[str, str], list] = {}
    for (g, key, status, _), v in f["key"].items():
        t = times.setdefault(g, [0, 0])
        t[0] += v[0]
        t[1] += v[0] if status != 200 else 0
        k = key_spend_.setdefault((g, _none(key) or "(none)"), [0, 0.0])
        k[0] += v[0]
        k[1] += v[1]
    over_time = [{"group": g, "requests": n, "errors": e} for g, (n, e) in sorted(times.items())]
    strategies: dict[str, int] = {}
    models: dict[str, int] = {}
    errors: dict[int, int] = {}
    for (_, strategy, model, status), v in f["mix"].items():
        strategies[strategy or "—"] = strategies.get(strategy or "—", 0) + v[0]
        models[model or "—"] = models.get(model or "—", 0) + v[0]
        if status != 200:
            errors[_none(status)] = errors.get(_none(status), 0) + v[0]
    req_merged: dict[int, int] = {}
    req_by_time: dict[str, list[tuple[int, int]]] = {}
    for (g, b, _, _), v in f["rlat"].items():
        req_merged[int(b)] = req_merged.get(int(b), 0) + v[0]
        req_by_time.setdefault(g, []).append((int(b), v[0]))
    req = list(req_merged.items())
    own_merged: dict[int, int] = {}
    own_by_time: dict[str, list[tuple[int, int]]] = {}
    for (g, b, _, _), v in f["olat"].items():
        own_merged[int(b)] = own_merged.get(int(b), 0) + v[0]
        own_by_time.setdefault(g, []).append((int(b), v[0]))
    own = list(own_merged.items())
    model_spend: dict[str, list] = {}
    for (_, model, role, _), v in f["answer"].items():
        m = model_spend.setdefault(model, [0, 0.0, 0.0])
        m[0] += v[0]
        m[1] += v[1]
        m[2] += v[1] if role == "explore" else 0.0
    per: dict[str, list[tuple[int, int]]] = {}
    merged: dict[int, int] = {}
    for (_, model, b, _), v in f["alat"].items():
        per.setdefault(model, []).append((int(b), v[0]))
        merged[int(b)] = merged.get(int(b), 0) + v[0]
    every = list(merged.items())
    outcomes: dict[str, int] = {}
    for (_, _model, _role, outcome), v in f["answer"].items():
        if outcome != "ok":
            outcomes[outcome] = outcomes.get(outcome, 0) + v[0]
    failed = [{"outcome": _none(o), "calls": n} for o, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0]))]
    ranked = lambda d: [{"name": k, "requests": v} for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))]  # noqa: E731
    return {"requests": sum(r["requests"] for r in over_time), "over_time": over_time,
            "strategies": ranked(strategies), "models": ranked(models),
            "latency": {"request_p50_ms": quantile_of(req, 0.5), "request_p99_ms": quantile_of(req, 0.99),
                        "upstream_p50_ms": quantile_of(every, 0.5), "upstream_p99_ms": quantile_of(every, 0.99),
                        "overhead_p50_ms": quantile_of(own, 0.5), "overhead_p99_ms": quantile_of(own, 0.99)},
            "upstream_latency": [{"model": m, "calls": sum(n for _, n in h), "p50_ms": quantile_of(h, 0.5),
                                  "p99_ms": quantile_of(h, 0.99)} for m, h in sorted(per.items())],
            "errors": [{"status": s, "requests": n} for s, n in sorted(errors.items(), key=lambda kv: (kv[0] is None, str(kv[0])))],
            "failed_calls": failed,
            "latency_over_time": [{"group": g, "p50_ms": quantile_of(h, 0.5), "p99_ms": quantile_of(h, 0.99),
                                   "overhead_p50_ms": quantile_of(own_by_time.get(g, []), 0.5),
                                   "overhead_p99_ms": quantile_of(own_by_time.get(g, []), 0.99)}
                                  for g, h in sorted(req_by_time.items())],
            "spend_per_model": [{"model": m, "calls": v[0], "usd": v[1], "explore_usd": v[2]}
                                for m, v in sorted(model_spend.items(), key=lambda kv: -kv[1][1])],
            "spend_per_key": [{"group": g, "key": k, "requests": v[0], "usd": v[1]}
                              for (g, k), v in sorted(key_spend_.items())]}


def cascades(db: LogConnection, *, since: float, now: float | None = None, raw_only: bool = False
             ) -> dict[str, Any]:
    """Agreement cascades: verdicts, how often they escalated (only a cascade escalates), and the kinds of their
    disagreements."""
    f = facets(db, {"verdict": None, "kind": None}, now=time.time() if now is None else now, raw_only=raw_only)
    verdicts = {k[1]: v[0] for k, v in sorted(f["verdict"].items())}
    escalated = sum(v[1] for v in f["verdict"].values())
    n = sum(verdicts.values())
    kinds = [{"kind": _none(k[1]), "requests": v[0]} for k, v in sorted(f["kind"].items(), key=lambda kv: (-kv[1][0], kv[0][1]))]
    return {"cascades": n, "verdicts": verdicts, "agreement": rate(verdicts.get("agree", 0), n),
            "escalation": rate(escalated, n), "kinds": kinds}


# ------------------------------------------------------------------------------------------------ requests

def trace(db: sqlite3.Connection, request_id: str) -> dict[str, Any] | None:
    """One request as logged: its decision, every answer (decoded calls, verdict, cost), its text if kept."""
    row = db.execute("SELECT * FROM requests WHERE request_id = ? ORDER BY ts LIMIT 1", (request_id,)).fetchone()
    if row is None:
        return None
    req = dict(row)
    req["kinds"] = json.loads(req["kinds"] or "[]")
    req["request"] = json.loads(req["request"]) if req["request"] else None
    answers = []
    for a in db.execute("SELECT * FROM answers WHERE request_id = ? ORDER BY id", (request_id,)):
        a = dict(a)
        a["calls"] = json.loads(a["calls"]) if a["calls"] else None
        a["raw"] = json.loads(a["raw"]) if a["raw"] else None
        answers.append(a)
    return {"request": req, "answers": answers, "cost_usd": sum(a["cost_usd"] or 0 for a in answers)}


def filter_values(db: LogConnection, since: float, now: float | None = None) -> dict[str, list]:
    """The values each filter of the Requests view can take in the range (from the summary)."""
    f = facets(db, {"key": None, "mix": None}, now=time.time() if now is None else now)
    seen: dict[str, set] = {"key": set(), "model": set(), "strategy": set(), "status": set()}
    for _, key, status, _ in f["key"]:
        seen["key"].add(key)
        seen["status"].add(status)
    for _, strategy, model, _ in f["mix"]:
        seen["strategy"].add(strategy)
        seen["model"].add(model)
    return {name: sorted(v for v in values if v != "") for name, values in seen.items()}


def router_versions(db: LogConnection, *, since: float, now: float | None = None, raw_only: bool = False
                    ) -> list[dict[str, Any]]:
    """Each router version that served in the range: first and last request, requests (the reload history)."""
    f = facets(db, {"version": None}, now=time.time() if now is None else now, raw_only=raw_only)
    rows = [{"version": _none(k[1]), "first_ts": v[6], "last_ts": v[7], "requests": v[0]} for k, v in f["version"].items()]
    return sorted(rows, key=lambda r: r["first_ts"])


def version_costs(db: LogConnection, *, since: float, now: float) -> dict[str, dict[str, float]]:
    """Per router version: answered requests and what the callers were charged for them, from the summary's
    hours. In an hour two versions shared (a reload's), the hour's answered requests and spend are split by each
    version's share of its requests."""
    f = facets(db, {"version": BY_HOUR, "key": BY_HOUR}, now=now)
    share: dict[str, dict[str, int]] = {}
    for (hour, version, _, _), v in f["version"].items():
        share.setdefault(hour, {})[_none(version) or ""] = v[0]
    out: dict[str, dict[str, float]] = {}
    for (hour, _key, status, _), v in f["key"].items():
        if status != 200 or hour not in share:
            continue
        total = sum(share[hour].values())
        for version, n in share[hour].items():
            t = out.setdefault(version, {"requests": 0.0, "spent_usd": 0.0})
            t["requests"] += v[0] * n / total
            t["spent_usd"] += v[1] * n / total
    for t in out.values():
        t["usd_per_request"] = t["spent_usd"] / t["requests"] if t["requests"] else None
    return out


# ---------------------------------------------------------------------------------------------- the ledger

def key_spend(rows, *, now: float, limits: dict[str, float | None] | None = None,
              explore_usd_per_day: float | None = None) -> dict[str, Any]:
    """Spend per key today (UTC) from the ledger rows (serving.core.state.LedgerRow), against each key's
    `usd_per_day` limit; the exploration key (`__explore__`) against `explore.usd_per_day`."""
    from serving.core.auth import OPERATOR_KEY

    day, limits = utc_day(now), dict(limits or {})
    if explore_usd_per_day is not None:
        limits[OPERATOR_KEY] = explore_usd_per_day
    per: dict[str, dict] = {k: {"key": k, "usd": 0.0, "calls": 0, "by_kind": {}} for k in limits}
    for r in rows:
        if r.day != day:
            continue
        t = per.setdefault(r.key_id, {"key": r.key_id, "usd": 0.0, "calls": 0, "by_kind": {}})
        t["usd"] += r.usd
        t["calls"] += 1
        t["by_kind"][r.kind] = t["by_kind"].get(r.kind, 0.0) + r.usd
    for t in per.values():
        limit = limits.get(t["key"])
        t["limit_usd"], t["used_share"] = limit, (t["usd"] / limit if limit else None)
    keys = sorted(per.values(), key=lambda t: (-t["usd"], t["key"]))
    return {"day": day, "keys": keys, "usd": sum(t["usd"] for t in keys)}
