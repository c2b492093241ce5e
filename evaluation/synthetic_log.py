"""A synthetic decision log: what the gateway's writer logs for `n` requests over `days` days (five keys, a router
reload, 20% cascades, 1.5% upstream errors, explored answers, no request text), for the console's bench and tests.

    for batch in synthetic_records(pool, 900, 3.0, now=time.time(), explore=0.2, seed=1):
        decision_log.write(batch)
    write_log(folder, pool, 100_000, 7.0, now=time.time(), explore=0.01, seed=0)   # through the writer, counts
"""

from __future__ import annotations

import json
import random
from pathlib import Path

KEYS = (("acme-prod", 0.45), ("acme-staging", 0.1), ("beta", 0.25), ("gamma-batch", 0.15), ("ops", 0.05))
CITIES = ("Paris", "Berlin", "Lisbon", "Osaka", "Lima", "Cairo", "Oslo", "Quito")


def _prices(model) -> tuple[float, float]:
    p = model.prices
    return (p.input_per_mtok or 0.0) / 1e6, (p.output_per_mtok or 0.0) / 1e6


def _disagreement(x: list, y: list) -> str | None:
    """How two synthetic answers differ, in the gateway's words (data/verify/agree.py DISAGREEMENT_KINDS)."""
    if x == y:
        return None
    if not x or not y:
        return "first_declines" if not x else "second_declines"
    return "functions" if x[0]["name"] != y[0]["name"] else "arguments"


def synthetic_records(pool, n: int, days: float, *, now: float, explore: float = 0.01, seed: int = 0,
                      batch: int = 2000):
    """Batches of the writer's records (("request", request row, answer rows), ("answers", None, rows)) for `n`
    requests ending at `now`, in the order the gateway logs them (each when it ends)."""
    rng = random.Random(seed)
    names = pool.names
    by_price = sorted(pool.models, key=lambda m: sum(_prices(m)))
    weights = [1.0 / (1 + i) for i in range(len(by_price))]  # the router picks cheaper models more often
    acc = {m.name: 0.72 + 0.25 * rng.random() for m in pool.models}
    speed = {m.name: rng.uniform(250, 900) for m in pool.models}
    price = {m.name: _prices(m) for m in pool.models}
    top = by_price[-1].name
    keys, key_w = [k for k, _ in KEYS], [w for _, w in KEYS]
    span, out = days * 86400, []

    def answer(rid: str, model: str, role: str, right: list, wrong: list, ok: bool = True) -> dict:
        tin, tout = int(rng.lognormvariate(6.8, 0.5)), int(rng.uniform(15, 90))
        calls = right if rng.random() < acc[model] else rng.choice(wrong)
        cost = tin * price[model][0] + tout * price[model][1] if ok else 0.0
        return {"request_id": rid, "model": model, "role": role, "outcome": "ok" if ok else "http_5xx",
                "latency_ms": rng.lognormvariate(0, 0.35) * speed[model], "cost_usd": cost,
                "input_tokens": tin if ok else None, "output_tokens": tout if ok else None,
                "calls": json.dumps(calls) if ok else None, "raw": None, "decoder": "json" if ok else None,
                "decode_error": None}

    for i in range(n):
        rid = f"{rng.getrandbits(128):032x}"
        city = rng.choice(CITIES)
        right = [{"name": "get_weather", "arguments": {"city": city}}]
        wrong = [[{"name": "get_weather", "arguments": {"city": rng.choice(CITIES)}}],
                 [{"name": "get_forecast", "arguments": {"city": city, "days": 3}}], []]
        cascade = rng.random() < 0.2
        failed = rng.random() < 0.015
        if cascade:
            a, b = rng.sample(names[:-1] if len(names) > 2 else names, 2)
            answers = [answer(rid, a, "first", right, wrong), answer(rid, b, "first", right, wrong)]
            kind = _disagreement(*(json.loads(x["calls"]) for x in answers))
            verdict = "agree" if kind is None else "disagree"
            if verdict == "disagree":
                answers.append(answer(rid, top, "escalate", right, wrong))
            strategy, by = f"agree({a}, {b})>{top}", answers[-1]["model"]
        else:
            by = rng.choices(by_price, weights)[0].name
            answers, verdict, strategy = [answer(rid, by, "first", right, wrong, ok=not failed)], None, f"single({by})"
        status = rng.choice((502, 503, 504)) if failed and not cascade else 200
        latency = sum(a["latency_ms"] or 0 for a in answers) + rng.uniform(2, 12)
        ts = now - span * (1 - (i + 1) / n) - latency / 1e3  # logged when it ends; started `latency` earlier
        request = {"ts": ts, "request_id": rid, "key_id": rng.choices(keys, key_w)[0],
                   "router_version": "bench-v1" if i < 2 * n // 3 else "bench-v2", "kind": "served",
                   "status": status, "example_id": None, "routed": 1, "chosen": by, "rule": "threshold",
                   "strategy": strategy, "verdict": verdict,
                   "kinds": json.dumps([kind] if cascade and kind else []),
                   "answered_by": by if status == 200 else None,
                   "cost_usd": sum(a["cost_usd"] for a in answers) if status == 200 else 0.0,
                   "latency_ms": latency, "stream": int(rng.random() < 0.3), "request": None, "api": "chat",
                   "session": None}
        out.append(("request", request, answers))
        if status == 200 and rng.random() < explore:
            called = {a["model"] for a in answers}
            out.append(("answers", None, [answer(rid, m, "explore", right, wrong) for m in names if m not in called]))
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out


def write_log(folder: Path | str, pool, n: int, days: float, *, now: float, explore: float, seed: int,
              progress: bool = True) -> dict[str, int]:
    """A synthetic log of `n` requests in `folder` (emptied first), through the gateway's writer; `folder` may be
    an empty PostgreSQL database's URL (its writer then, every row kept)."""
    from rich.progress import track

    from data.logged import is_log_url
    from serving.core.decision_log import DecisionLog

    if is_log_url(folder):
        from serving.core.decision_log_pg import PostgresDecisionLog

        pg = PostgresDecisionLog(str(folder), keep_days=None)
        for batch in track(synthetic_records(pool, n, days, now=now, explore=explore, seed=seed), "writing the log",
                           disable=not progress):
            pg.write(batch)
        counts = {t: pg.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("requests", "answers", "summary")}
        pg.db.close()
        return counts
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("decisions*.sqlite*"):
        old.unlink()
    log = DecisionLog(folder, max_mb=1e9)  # one file: the bench times the queries, not rotation
    log.db.execute("PRAGMA cache_size = -262144")  # 256 MiB: random request ids make index inserts page-bound
    batches = synthetic_records(pool, n, days, now=now, explore=explore, seed=seed)
    for batch in track(batches, "writing the log", disable=not progress):
        log.write(batch)
    counts = {t: log.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("requests", "answers", "summary")}
    log.db.close()
    return counts
