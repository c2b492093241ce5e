"""Quality without ground truth: consensus labels on the explored requests of the decision log.

    with open_log("runs/gateway/log") as db:
        q = quality(db, since=0.0, pool_names=pool.names)
    q["served"]          # estimated accuracy of what was served: {k, n, mean, low, high} (95% Wilson interval)
    q["per_model"]       # each model's agreement with consensus on the same requests (a drifting model shows here)

An explored request is one exploration asked every other pool model about (answers with role `explore`), so
its answers from the whole pool vote (data/consensus.py: agreement in meaning, Dawid–Skene reliabilities). The
answer served is right when its model's consensus label is; the rate over explored requests estimates the
accuracy of everything served (exploration samples requests at random, `explore.rate`). Only the newest
`MAX_EXPLORED` explored requests of the range are labelled, so a page stays fast on a large log.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from typing import Any

import numpy as np

from data.schema import Tool
from serving.console.queries import SERVED, rate

MAX_EXPLORED = 1000


def explored_answers(db: sqlite3.Connection, since: float, limit: int = MAX_EXPLORED):
    """(answer rows, tools per request, answering model per request) of the newest explored requests."""
    ids, looked = [], set()
    for f in reversed(db.files):  # newest file first, each read backwards from its last explored answer
        explored = db.execute(f"SELECT request_id FROM {f.schema}.answers WHERE id >= ? AND role = 'explore' "
                              "ORDER BY id DESC", (f.first_answer,))
        for (rid,) in explored:
            if len(ids) >= limit:
                break
            if rid in looked:
                continue
            looked.add(rid)
            row = db.execute(f"SELECT request_id, answered_by, request, router_version FROM requests WHERE request_id = ? AND "
                             f"{SERVED} AND status = 200 LIMIT 1", (rid, since)
                             ).fetchone()
            if row is not None:
                ids.append(tuple(row))
        explored.close()
    served = {rid: by for rid, by, _, _ in ids}
    versions = {rid: version for rid, _, _, version in ids}
    tools = {}
    for rid, _, text, _ in ids:
        offered = json.loads(text).get("tools", []) if text else []
        tools[rid] = [Tool.model_validate(t) for t in offered]
    rows, seen, parsed = [], set(), {}
    marks = ",".join("?" * len(served))
    for rid, model, calls in db.execute(f"SELECT request_id, model, calls FROM answers WHERE outcome = 'ok' AND "
                                        f"request_id IN ({marks}) ORDER BY id", tuple(served)) if served else []:
        if (rid, model) in seen:  # a model answers once per request in the vote (the first answer logged)
            continue
        seen.add((rid, model))
        if calls not in parsed:  # the same answer text is parsed once
            parsed[calls] = json.loads(calls) if calls else []
        rows.append({"example_id": rid, "model": model, "calls": parsed[calls], "text": calls or "[]"})
    return rows, tools, served, versions


def labels(rows: list[dict], tools: dict[str, list[Tool]], names: list[str]):
    """data.consensus's labels of the answer rows, comparing each distinct pair of answers of a request once
    (answers that spell the same calls are common; the comparison is most of the page's time): the same
    agreement tensor `agreement_tensor` builds, then the same fit."""
    from data.consensus import fit_consensus, result_of
    from data.verify.agree import calls_agree

    ids = sorted({r["example_id"] for r in rows})
    row, col = {e: i for i, e in enumerate(ids)}, {m: j for j, m in enumerate(names)}
    n, m = len(ids), len(names)
    calls: list[list[list | None]] = [[None] * m for _ in range(n)]
    texts: list[list[str]] = [[""] * m for _ in range(n)]
    for r in rows:
        i, j = row[r["example_id"]], col[r["model"]]
        calls[i][j], texts[i][j] = r["calls"], r.get("text") or json.dumps(r["calls"], sort_keys=True)
    answered = np.array([[c is not None for c in cs] for cs in calls], dtype=bool).reshape(n, m)
    declined = np.array([[c is not None and not c for c in cs] for cs in calls], dtype=bool).reshape(n, m)
    agree = np.zeros((n, m, m), dtype=bool)
    # Requests offering the same tools (an agent's requests, or none kept) compare the same pair of answer texts
    # once between them, not once each.
    seen: dict[tuple[str, str, str], bool] = {}
    for i, e in enumerate(ids):
        here = np.flatnonzero(answered[i])
        agree[i, here, here] = True
        spelled = texts[i]  # the answer's logged text: the same text, the same calls
        offered = tools.get(e) or []
        tkey = json.dumps([t.model_dump(mode="json") for t in offered], sort_keys=True) if offered else ""
        for a, b in itertools.combinations(here, 2):
            key = (tkey, spelled[a], spelled[b])
            if key not in seen:  # calls_agree checks both directions: symmetric
                seen[key] = seen[(tkey, spelled[b], spelled[a])] = calls_agree(offered, calls[i][a], calls[i][b])
            agree[i, a, b] = agree[i, b, a] = seen[key]
    return result_of(ids, names, fit_consensus(agree, answered, declined))


def quality(db: sqlite3.Connection, *, since: float, pool_names: list[str] | None = None) -> dict[str, Any]:
    """Estimated accuracy of the served answers and each model's agreement with consensus, with counts."""
    rows, tools, served, versions = explored_answers(db, since)
    out: dict[str, Any] = {"explored": len(served), "limit": MAX_EXPLORED, "text_kept": any(tools.values()),
                           "served": rate(0, 0), "per_model": [], "per_version": {}}
    voters = {r["example_id"] for r in rows}
    if len({r["model"] for r in rows}) < 2 or not voters:
        return out
    names = sorted({r["model"] for r in rows} | set(pool_names or []))
    res = labels(rows, tools, names)
    frame = res.frame
    correct = {(e, m): bool(c) for e, m, c in zip(frame["example_id"], frame["model"], frame["correct"])}
    hits = [correct[(rid, by)] for rid, by in served.items() if (rid, by) in correct]
    out["served"] = rate(sum(hits), len(hits))
    by_version: dict[str, list[bool]] = {}
    for rid, by in served.items():
        if (rid, by) in correct:
            by_version.setdefault(versions[rid] or "", []).append(correct[(rid, by)])
    out["per_version"] = {v: rate(sum(h), len(h)) for v, h in by_version.items()}
    out["abstained"] = int(frame.drop_duplicates("example_id")["abstained"].sum())
    for m in names:
        mine = [c for (e, mm), c in correct.items() if mm == m]
        if mine:
            out["per_model"].append({"model": m, **rate(sum(mine), len(mine)),
                                     "reliability": res.reliability[m]["calling"]})
    return out


class QualityCache:
    """quality() per log folder and range length, reused for `ttl_s` seconds (`QUALITY_TTL_S`): Savings (the
    reference rule), Quality and Router all need the consensus labels, the console's slowest figure, and an
    operator moving between them should not pay for it three times. Figures are at most `ttl_s` old."""

    def __init__(self, ttl_s: float = 30.0) -> None:
        self.ttl_s, self.entries, self.lock = ttl_s, {}, threading.Lock()

    def get(self, db, folder, *, since: float, now: float, pool_names: list[str]) -> dict[str, Any]:
        key = (str(folder), "all" if since <= 0 else round(now - since), tuple(pool_names))
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        out = quality(db, since=since, pool_names=pool_names)
        with self.lock:
            self.entries = {k: v for k, v in self.entries.items() if now - v[0] < self.ttl_s}
            self.entries[key] = (now, out)
        return out
