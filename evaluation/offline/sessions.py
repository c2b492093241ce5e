"""Per-call vs session-aware routing, priced on replayed multi-turn conversations: a cost simulation.

    switchcraft bench sessions --router runs/v3/router --pool configs/pools/bfcl_v3_2025.yaml \\
        --outputs runs/v3/outputs.parquet --threshold 0.5 --threshold 0.8 --threshold 0.85 --threshold 0.9 \\
        --out runs/bench_sessions/v3.json              # CPU only, about 5 minutes on two busy cores

BFCL v4's multi-turn conversations routed turn by turn and priced per call, per call with the provider's cache,
and by the gateway's own `keep_or_switch`. Method, prices and figures: docs/agents.md.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluation.offline.markdown import markdown_table

if TYPE_CHECKING:  # the heavy imports wait for a run
    from data.pool import Pool
    from serving.policy import Decision

# Cache prices, USD per million input tokens (cached read, cache write), from each provider's published price:
#   OpenAI (openai.com/api/pricing, Aug 2025): cached input is 1/4 of the input price for the GPT-4.1 family, o3
#     and o4-mini, 1/2 for GPT-4o and GPT-4o mini; no write surcharge (caching is automatic).
#   Anthropic (docs.anthropic.com prompt caching): a cache read is 0.1x the input price, a 5-minute cache write 1.25x.
#   DeepSeek (api-docs.deepseek.com/quick_start/pricing-details-usd, before 5 Sept 2025): cache hit 0.07 (chat),
#     0.14 (reasoner); no write surcharge.
# Models not listed (Together's serverless models, self-hosted ones, Gemini, Mistral) get no discount.
CACHE_PRICES: dict[str, tuple[float, float | None]] = {
    "gpt-4.1": (0.50, None), "o3-high": (0.50, None), "o4-mini-high": (0.275, None),
    "gpt-4o-2024-08-06": (1.25, None), "gpt-4o-mini": (0.075, None),
    "gpt-4o-2024-08-06-FC": (1.25, None), "gpt-4o-mini-2024-07-18": (0.075, None),
    "claude-4-sonnet-thinking-off": (0.30, 3.75), "claude-4-sonnet-thinking-on": (0.30, 3.75),
    "claude-3-5-sonnet-20240620": (0.30, 3.75), "claude-3-opus-20240229": (1.50, 18.75),
    "claude-3-haiku-20240307": (0.03, 0.30),
    "deepseek-v3-0324": (0.07, None), "deepseek-r1-0528": (0.14, None),
}
ROWS = ("per_call", "per_call_cached", "session")


@dataclass
class Turn:
    example_id: str
    input_tokens: int  # the gateway's estimate from the request's size
    answer_tokens: int  # the ground-truth assistant message: what the next turn sends again
    tools: str  # the tool list's identity: a change breaks the provider's cache


@dataclass
class Conversation:
    id: str
    turns: list[Turn] = field(default_factory=list)


def with_cache_prices(pool: Pool, table: dict[str, tuple[float, float | None]] = CACHE_PRICES) -> Pool:
    """`pool` with `table`'s cache prices on its per-token models that have none of their own."""
    from data.pool import Pool

    raw = pool.model_dump(exclude_none=True)
    for m in raw["models"]:
        p = m.get("prices") or {}
        if m["name"] in table and "input_per_mtok" in p and "cached_input_per_mtok" not in p:
            cached, write = table[m["name"]]
            p["cached_input_per_mtok"] = cached
            if write is not None:
                p["cache_write_per_mtok"] = write
    return Pool.model_validate(raw)


def chat_body(example) -> dict[str, Any]:
    """The Chat Completions body of an example's request (what the gateway sizes)."""
    tools = [{"type": "function", "function": t.original or {"name": t.name, "description": t.description,
                                                                "parameters": t.parameters}} for t in example.tools]
    return {"messages": [m.model_dump(mode="json", exclude_none=True) for m in example.messages], "tools": tools}


def conversations(examples: list, chars_per_token: float = 3.0) -> tuple[list[Conversation], list[list]]:
    """Turns grouped by conversation (`<source>:<entry>:turn<k>`), in turn order; and their examples alike."""
    from serving.core.budget import payload_size, tokens_in

    by_entry: dict[str, list] = defaultdict(list)
    for ex in examples:
        entry, _, turn = ex.id.rpartition(":turn")
        if not turn.isdigit():
            raise ValueError(f"{ex.id}: not a multi-turn example id (<source>:<entry>:turn<k>); ingest bfcl_v4's "
                             "multi_turn_* categories")
        by_entry[entry].append(ex)
    convs, grouped = [], []
    for entry, exs in by_entry.items():
        exs.sort(key=lambda e: int(e.id.rpartition(":turn")[2]))
        conv = Conversation(entry)
        for ex in exs:
            body = chat_body(ex)
            alt = ex.expected.alternatives[0] if ex.expected.alternatives else []
            answer = [{"name": c.name, "arguments": {k: (a.values or [None])[0] for k, a in c.args.items()}}
                      for c in alt]
            conv.turns.append(Turn(ex.id, tokens_in(payload_size(body), chars_per_token),
                                   tokens_in(payload_size({"tool_calls": answer}), chars_per_token),
                                   hashlib.sha256(json.dumps(body["tools"], sort_keys=True).encode()).hexdigest()))
        convs.append(conv)
        grouped.append(exs)
    return convs, grouped


class Biller:
    """What a provider bills for one turn on a model."""

    def __init__(self, pool: Pool, costs: dict[str, float], output_tokens: dict[str, float] | None = None) -> None:
        self.pool, self.costs, self.output_tokens = pool, costs, output_tokens or {}

    def __call__(self, model: str, turn: Turn, cached_prefix: int, cache: bool) -> float:
        p = self.pool.get(model).prices
        if p.kind != "token":
            return self.costs[model]
        out = self.output_tokens.get(model, turn.answer_tokens) * p.output_per_mtok
        if not cache:
            return (turn.input_tokens * p.input_per_mtok + out) / 1e6
        hit = min(cached_prefix, turn.input_tokens)
        return (hit * p.cached_input_price + (turn.input_tokens - hit) * p.cache_write_price + out) / 1e6


def replay(conv: Conversation, decisions: list[Decision], pool: Pool, bill: Biller, gap_s: float,
           ttl_s: float) -> dict[str, Any]:
    """One conversation under each row: its $ and its models, turn by turn."""
    from serving.gateway.sessions import Session, SessionState, keep_or_switch

    per_call = [d.chosen for d in decisions]
    session = Session(conv.id, "header", SessionState(), cache_ttl_s=ttl_s)
    t0, served, rules = time.time() - gap_s * len(conv.turns), [], []
    for k, (turn, d) in enumerate(zip(conv.turns, decisions, strict=True)):
        now = t0 + k * gap_s
        session.trace = {}
        kept = keep_or_switch(pool, session, d, now, turn.input_tokens)  # the gateway's own rule
        model = kept.first[0] if kept is not None else d.chosen
        served.append(model)
        rules.append(session.trace.get("rule"))
        st = session.state  # what serving/gateway/sessions.py `remember` keeps after a turn
        st.model, st.prefix_tokens, st.turns, st.last_at = model, turn.input_tokens + turn.answer_tokens, k + 1, now

    def billed(models: list[str], cache: bool) -> float:
        total = 0.0
        for k, (turn, model) in enumerate(zip(conv.turns, models)):
            prev = conv.turns[k - 1] if k else None
            warm = (prev is not None and models[k - 1] == model and prev.tools == turn.tools and gap_s <= ttl_s)
            total += bill(model, turn, prev.input_tokens + prev.answer_tokens if warm else 0, cache)
        return total

    rows = {"per_call": (per_call, False), "per_call_cached": (per_call, True), "session": (served, True)}
    return {"id": conv.id, "turns": len(conv.turns), "rules": rules,
            "usd": {row: billed(models, cache) for row, (models, cache) in rows.items()},
            "switches": {row: sum(a != b for a, b in zip(models, models[1:])) for row, (models, _) in rows.items()},
            # turns served by a model the router's P(correct) puts below τ
            "below_threshold": {row: sum(d.probabilities.get(m, 0.0) < d.threshold for d, m in zip(decisions, models))
                                for row, (models, _) in rows.items()},
            "models": {"per_call": per_call, "session": served}}


def summarize(replays: list[dict[str, Any]], resamples: int = 2000) -> dict[str, Any]:
    """$ per million conversations per row with 95% intervals, the paired difference from per call, switch rates."""
    import numpy as np

    from evaluation.offline.stats import paired_bootstrap

    transitions = np.array([max(r["turns"] - 1, 0) for r in replays], dtype=float)
    switches = {row: np.array([r["switches"][row] for r in replays], dtype=float) for row in ROWS}
    # per conversation: its share of turn transitions that switched (the estimand of the interval beside it), its $
    rows = {row: (np.divide(sw, transitions, out=np.zeros_like(sw), where=transitions > 0),
                  np.array([r["usd"][row] for r in replays])) for row, sw in switches.items()}
    ci, turns = paired_bootstrap(rows, reference="per_call", resamples=resamples), sum(r["turns"] for r in replays)
    out: dict[str, Any] = {"rows": {row: {
        "usd_per_million_conversations": float(usd.mean() * 1e6),
        "usd_ci": [ci[row].usd_per_million.low, ci[row].usd_per_million.high],
        "delta_vs_per_call": float((usd - rows["per_call"][1]).mean() * 1e6),
        "delta_ci": [ci[row].delta_usd_per_million.low, ci[row].delta_usd_per_million.high],
        "switches_per_transition": float(share.mean()), "switch_rate_ci": [ci[row].accuracy.low, ci[row].accuracy.high],
        "conversations_with_a_switch": float((switches[row] > 0).mean()),
        "turns_below_threshold": float(sum(r["below_threshold"][row] for r in replays) / max(turns, 1)),
    } for row, (share, usd) in rows.items()}}
    out["session_rules"] = dict(sorted(Counter(str(rule) for r in replays for rule in r["rules"]).items()))
    for row in ("per_call", "session"):
        out["rows"][row]["turns_per_model"] = dict(Counter(m for r in replays for m in r["models"][row]).most_common())
    return out


def recorded_output_tokens(path: str | Path, pool: Pool) -> dict[str, float]:
    """Mean recorded output tokens per query for each pool model (outputs.parquet: `model`, `usage` JSON)."""
    import pandas as pd

    df = pd.read_parquet(path, columns=["model", "usage"])
    names = {m.recorded_as or m.name: m.name for m in pool.models}
    tokens = df["usage"].map(lambda u: (json.loads(u) if isinstance(u, str) else (u or {})).get("output_tokens"))
    df = df.assign(out=pd.to_numeric(tokens, errors="coerce"), name=df["model"].map(names)).dropna()
    return {str(k): float(v) for k, v in df.groupby("name")["out"].mean().items()}


def route_turns(router_dir: str | Path, grouped: list[list], pool: Pool,
                thresholds: tuple[float | None, ...] = (None,)) -> tuple[dict[float, list[list[Decision]]], dict]:
    """The router's single-model decision for every turn at each threshold τ (None: the router's own; the gateway's
    `model: "router-<τ>"`), by serving.policy as the gateway decides; and the router's profiled costs."""
    import numpy as np

    from serving.client import policy_from_info
    from training.router import load_router

    router = load_router(router_dir, device="cpu")
    missing = [m for m in router.models if m not in pool.names]
    if missing:
        raise ValueError(f"{router_dir}: the router's models {missing} are not in the pool; pass its pool (--pool)")
    policy = policy_from_info(router.info)
    flat = [ex for exs in grouped for ex in exs]
    probs = router.predict(flat) if flat else np.zeros((0, len(router.models)))
    out = {}
    for tau in thresholds:
        it = iter(probs)
        out[policy.threshold if tau is None else tau] = [[policy.decide(next(it), threshold=tau) for _ in exs]
                                                         for exs in grouped]
    return out, dict(policy.costs)


@dataclass
class SessionBenchConfig:
    router: Path
    pool: Path
    source_path: str = "package:bfcl_eval/data"
    categories: tuple[str, ...] = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                                   "multi_turn_long_context")
    limit: int | None = None  # conversations, the first ones
    thresholds: tuple[float | None, ...] = (None,)  # None: the router's own
    outputs: Path | None = None
    turn_gap_s: float = 20.0
    out: Path | None = None


def run_bench(cfg: SessionBenchConfig) -> dict[str, Any]:
    from data.config import package_path
    from data.pool import load_pool
    from data.sources import IngestReport, read_source
    from serving.gateway.sessions import CACHE_TTL_S

    pool = with_cache_prices(load_pool(cfg.pool))
    location = cfg.source_path
    if location.startswith("package:"):
        location = str(package_path(location.removeprefix("package:")))
    examples = read_source("bfcl_v4", location, IngestReport(), categories=list(cfg.categories))
    convs, grouped = conversations(examples)
    if cfg.limit is not None:
        convs, grouped = convs[:cfg.limit], grouped[:cfg.limit]
    if not convs:
        raise ValueError(f"{cfg.source_path}: no multi-turn conversations in categories {list(cfg.categories)}")
    by_tau, costs = route_turns(cfg.router, grouped, pool, cfg.thresholds)
    bill = Biller(pool, costs, recorded_output_tokens(cfg.outputs, pool) if cfg.outputs else None)
    result = {"config": asdict(cfg),
              "cache_prices": {m: CACHE_PRICES[m] for m in pool.names if m in CACHE_PRICES},
              "conversations": len(convs), "turns": sum(len(c.turns) for c in convs), "thresholds": {}}
    for tau, decisions in by_tau.items():
        replays = [replay(c, d, pool, bill, cfg.turn_gap_s, CACHE_TTL_S) for c, d in zip(convs, decisions)]
        result["thresholds"][f"{tau:g}"] = summarize(replays)
    if cfg.out is not None:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        cfg.out.write_text(json.dumps(result, indent=2, default=str))
    return result


def to_markdown(result: dict[str, Any]) -> str:
    import pandas as pd

    rows, notes = [], []
    for tau, summary in result["thresholds"].items():
        rows += [[tau, row, f"{r['usd_per_million_conversations']:,.0f} [{r['usd_ci'][0]:,.0f}, {r['usd_ci'][1]:,.0f}]",
                  f"{r['delta_vs_per_call']:+,.0f} [{r['delta_ci'][0]:+,.0f}, {r['delta_ci'][1]:+,.0f}]",
                  f"{r['switches_per_transition']:.3f}", f"{r['conversations_with_a_switch']:.1%}",
                  f"{r['turns_below_threshold']:.1%}"] for row, r in summary["rows"].items()]
        notes += [f"τ {tau}: session rules {summary['session_rules']}",
                  *(f"τ {tau}: turns per model, {row}: {summary['rows'][row]['turns_per_model']}"
                    for row in ("per_call", "session"))]
    head = ["τ", "routing", "$ / M conversations [95% CI]", "vs per call [95% CI]", "switches / turn",
            "conversations with a switch", "turns on a model below τ"]
    return "\n".join([f"{result['conversations']} conversations, {result['turns']} turns (a cost simulation: answers "
                      "not replayed)", "", markdown_table(pd.DataFrame(rows, columns=head)), *notes])

