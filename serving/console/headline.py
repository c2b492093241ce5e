"""The savings headline: one definition, called by the console's Savings view and `switchcraft traffic report`.

    with open_log("runs/gateway/log", since) as db:
        h = headline(db, pool, since=since, now=now, router_info=client.info)          # the default reference
        h = headline(db, pool, since=since, now=now, reference="gpt-4o-mini")           # the operator's
    h["saved_share"], h["interval"], h["reference_rule"], h["flags"]

Saved = what sending every answered request to the reference would have cost − what the callers were charged −
what exploration spent (the cost of learning: the operator pays it to keep the quality estimate and the next
router honest, so it counts against the saving). The reference, unless the operator names one, is the served
pool's best single model: the most accurate by consensus on the range's explored requests when at least
`MIN_EXPLORED` of them have its answer, else the most accurate on the router's training labels (router.json
`novelty.safe_model`), else the pool's dearest (output price); `reference_rule` and `reference_why` say which.
A figure that cannot be right is not printed: `flags` says why (too few requests, a reference without a price,
a saving beyond −100%). The 95% interval of the saved share resamples hours (a bootstrap over the range's hours
with answered requests: requests of one hour share their traffic's mix, so hours, not requests, are the
independent units).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from data.pool import Pool
from serving.console.queries import savings

MIN_REQUESTS = 30  # answered requests below which no saving is claimed
MIN_EXPLORED = 50  # explored requests with a model's answer before consensus may pick the reference
MIN_HOURS = 3  # hours with traffic an interval needs
BOOTSTRAP_SAMPLES = 1000


def money(v: float | None) -> str:
    """USD as the console and the report print it: 2 decimals from $1 on, 4 significant digits below."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    sign, a = ("−" if v < 0 else ""), abs(v)
    if a >= 1 or a == 0:
        return f"{sign}${a:,.2f}"
    digits = max(4, 4 - 1 - math.floor(math.log10(a)))
    return f"{sign}${a:.{digits}f}"


def has_price(pool: Pool, name: str) -> bool:
    p = pool.get(name).prices
    return any((p.input_per_mtok, p.output_per_mtok, p.usd_per_query, p.gpu_usd_per_hour))


def choose_reference(pool: Pool, *, asked: str | None = None, per_model: list[dict] | None = None,
                     router_info: dict | None = None) -> dict[str, str]:
    """{model, rule, why}: the operator's reference, else the pool's best single model (the module's rule)."""
    if asked:
        if asked not in pool.names:
            raise ValueError(f"ref {asked!r} is not a model of the served pool; the pool: {', '.join(pool.names)}")
        return {"model": asked, "rule": "chosen", "why": "chosen by the operator (?ref= / --reference)"}
    voted = [m for m in per_model or [] if m["model"] in pool.names and m["n"] >= MIN_EXPLORED
             and m["mean"] is not None and has_price(pool, m["model"])]
    if voted:
        best = max(voted, key=lambda m: (m["mean"], m["n"], m["model"]))
        return {"model": best["model"], "rule": "consensus",
                "why": f"the most accurate pool model by consensus on the explored requests ({100 * best['mean']:.1f}% "
                       f"agreement, n = {best['n']})"}
    safe = ((router_info or {}).get("novelty") or {}).get("safe_model")
    few = f"fewer than {MIN_EXPLORED} explored requests for consensus to pick one"
    if safe in pool.names and has_price(pool, safe):
        return {"model": safe, "rule": "router",
                "why": f"the most accurate single model on the router's training labels (router.json "
                       f"novelty.safe_model); {few}"}
    dearest = max(pool.models, key=lambda m: (m.prices.output_per_mtok or 0.0, m.prices.input_per_mtok or 0.0)).name
    return {"model": dearest, "rule": "dearest",
            "why": f"the pool's dearest model (output price), a last resort: {few}, and the router names no most "
                   "accurate model"}


def share_interval(hours: list[dict], seed: int = 0) -> tuple[float, float] | None:
    """The 95% bootstrap interval of 1 − (spent + exploration) / reference, resampling the hours."""
    if len(hours) < MIN_HOURS:
        return None
    cost = np.array([h["spent_usd"] + h["explore_usd"] for h in hours])
    ref = np.array([h["reference_usd"] for h in hours])
    pick = np.random.default_rng(seed).integers(0, len(hours), size=(BOOTSTRAP_SAMPLES, len(hours)))
    total = ref[pick].sum(axis=1)
    shares = 1 - cost[pick].sum(axis=1)[total > 0] / total[total > 0]
    if shares.size == 0:
        return None
    return float(np.quantile(shares, 0.025)), float(np.quantile(shares, 0.975))


def flags_of(pool: Pool, s: dict[str, Any]) -> list[dict[str, str]]:
    """Why the saving cannot be printed (empty: it can)."""
    ref, out = s["reference"]["model"], []
    if s["requests"] < MIN_REQUESTS:
        out.append({"figure": "saved", "why": f"only {s['requests']} answered requests in this range: a saving is "
                    f"claimed from {MIN_REQUESTS} on"})
    if not has_price(pool, ref) or not s["reference_usd"]:
        out.append({"figure": "saved", "why": f"the reference {ref} has no price that applies here (pool prices: "
                    f"{s['reference']['kind']}); pick a token-priced reference"})
    elif s["saved_share"] is not None and s["saved_share"] < -1:
        out.append({"figure": "saved", "why": f"a saving of {100 * s['saved_share']:,.0f}% (beyond −100%) is not shown: "
                    f"all to {ref} would cost {money(s['reference_usd'])} against {money(s['total_usd'])} spent with "
                    f"exploration; its price ({s['reference']['kind']}) does not describe this traffic, or exploration "
                    "outspends it (explore.rate)"})
    return out


def headline(db, pool: Pool, *, since: float, now: float, reference: str | None = None,
             router_info: dict | None = None, per_model: list[dict] | None = None) -> dict[str, Any]:
    """The Savings view's figures (queries.savings) with the reference chosen, exploration counted, the
    interval and the flags. `per_model`: quality()'s per-model agreement, computed here when needed."""
    if reference is None and per_model is None:
        from serving.console.quality import quality

        per_model = quality(db, since=since, pool_names=pool.names)["per_model"]
    choice = choose_reference(pool, asked=reference, per_model=per_model, router_info=router_info)
    s = savings(db, pool, since=since, reference=choice["model"], now=now)
    total = s["spent_usd"] + s["explore_usd"]
    net = s["reference_usd"] - total
    s.update(reference_rule=choice["rule"], reference_why=choice["why"], total_usd=total, saved_usd=net,
             gross_saved_usd=s["reference_usd"] - s["spent_usd"],
             saved_share=net / s["reference_usd"] if s["reference_usd"] else None,
             explore_share=s["explore_usd"] / s["reference_usd"] if s["reference_usd"] else None)
    s["flags"] = flags_of(pool, s)
    s["interval"] = None if s["flags"] else share_interval(s["per_hour"])
    return s


def pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def share_text(s: dict[str, Any]) -> str:
    """The saved share as both the page and the report print it: with its interval, or why it is not shown."""
    if s["flags"]:
        return "not shown: " + "; ".join(f["why"] for f in s["flags"])
    low_high = s["interval"]
    interval = (f" [95%: {pct(low_high[0])}, {pct(low_high[1])}]" if low_high
                else f" (no interval: fewer than {MIN_HOURS} hours with answered requests)")
    return pct(s["saved_share"]) + interval
