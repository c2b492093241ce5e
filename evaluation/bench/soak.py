"""A soak of the whole gateway: mixed and hostile traffic, router reloads and a Redis restart for N minutes; RSS,
5xx to input, lost requests and the ledger against what the upstreams billed (`summarise`'s checks).

    switchcraft bench soak --router runs/bfcl_v1/router_onnx --minutes 10

Method and figures: docs/performance.md.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from evaluation.mcp_fleet import McpStack, fleet_tools
from evaluation.bench._soak_traffic import Conversation, Req, console_login, mcp_request
from evaluation.bench._support import config_record, md_table, write_outputs
from evaluation.bench.gateway import LoopbackConfig, Stack, chat_body
from evaluation.bench.overhead import measured_model

MIX = {"routed": 0.40, "named": 0.10, "stream": 0.08, "stream_left": 0.04, "hostile": 0.12, "session": 0.12,
       "console_login": 0.04, "mcp_find": 0.05, "mcp_call": 0.03, "mcp_hostile": 0.02}
HOSTILE = {"hostile", "console_login", "mcp_hostile"}  # input nobody should send: a 5xx there is a 5xx to input
RSS_TOLERANCE = 0.10


def hostile_variants(model: str) -> list:
    """What a careless or hostile caller does to a real request (its `metadata.example_id` kept: the replay upstream
    answers whatever the gateway accepts): each gets a 4xx naming what is wrong, or an answer, never a 5xx."""
    deep = functools.reduce(lambda inner, _: {"x": inner}, range(200), {})  # nested 200 deep

    def surrogate_history(body: dict) -> dict:  # escaped inside earlier tool-call arguments: cleaned, answered
        call = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "\\ud800"}'}}]}
        return {**body, "messages": [*body["messages"], call, {"role": "tool", "tool_call_id": "c0", "content": "ok"},
                                     body["messages"][0]]}

    return [surrogate_history, lambda b: json.dumps({**b, "temperature": float("nan")}).encode(),
            lambda b: {**b, "messages": "hi"}, lambda b: {**b, "messages": [{"role": "wizard", "content": "hi"}]},
            lambda b: {**b, "tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}]},
            lambda b: {**b, "model": "no-such-model"}, lambda b: {**b, "max_tokens": -5},
            lambda b: {**b, "model": model, "tools": "all of them"},
            lambda b: {**b, "switchcraft": {"allowed_models": ["gpt-5"]}}]


@dataclass
class SoakConfig(LoopbackConfig):
    minutes: float = 10.0
    concurrency: int = 8
    reload_every_s: float = 60.0
    sample_every_s: float = 5.0
    warmup_fraction: float = 0.2  # RSS before this share of the run is warm-up, not judged
    seed: int = 0
    mcp_tools: int = 40  # tools of the MCP gateway's upstream fleet (two servers)

    def __post_init__(self) -> None:
        if not 0 < self.minutes <= 120:
            raise ValueError("--minutes must be within (0, 120]: the soak is bounded")
        if not 1 <= self.concurrency <= 64:
            raise ValueError("--concurrency must be within [1, 64]")
        if self.reload_every_s <= 0 or self.sample_every_s <= 0:
            raise ValueError("--reload-every and the sampling interval must be positive")


@dataclass
class Tally:
    sent: Counter = field(default_factory=Counter)  # per kind
    statuses: Counter = field(default_factory=Counter)  # "kind:status"
    input_5xx: int = 0
    lost: int = 0
    rpc_errors: int = 0  # MCP calls of real tools answered with a JSON-RPC error
    errors: Counter = field(default_factory=Counter)  # "kind:exception" of requests that got no answer
    sessions_continued: int = 0  # session turns the gateway served as a later turn of a session it kept
    outage_503: int = 0
    reloads: Counter = field(default_factory=Counter)
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, MB)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


OUTAGE_GRACE_S = 5.0  # after Redis is back: the gateway's store calls reconnect within it


def in_outage(outage: list[float | None], t0: float, t1: float) -> bool:
    """Whether a request sent at `t0` and answered at `t1` overlapped the store's outage [start, end + grace]."""
    start, end = outage
    return start is not None and t1 >= start and (end is None or t0 <= end + OUTAGE_GRACE_S)


async def one_request(http: httpx.AsyncClient, kind: str, req: Req, tally: Tally,
                      outage: list[float | None]) -> None:
    tally.sent[kind] += 1
    t0 = time.monotonic()
    try:
        if kind in ("stream", "stream_left"):
            async with http.stream("POST", req.url, json=req.json, headers=req.headers) as r:
                if kind == "stream":
                    async for _ in r.aiter_bytes():
                        pass
        else:  # raw content is JSON unless the request says otherwise
            r = await http.post(req.url, json=req.json, content=req.content, headers={
                **({"content-type": "application/json"} if req.content is not None else {}), **req.headers})
        status = r.status_code
        if req.rpc and status == 200 and "error" in _json(r):
            tally.rpc_errors += 1
        if kind == "session" and status == 200 and _json(r).get("switchcraft", {}).get("session", {}).get("turn", 0) > 1:
            tally.sessions_continued += 1
    except httpx.HTTPError as e:
        if req.oversized:  # refused before it was read: the connection closes under the sender, nothing is lost
            tally.statuses[f"{kind}:closed"] += 1
            return
        tally.lost += 1
        tally.statuses[f"{kind}:error"] += 1
        during = " during the outage" if in_outage(outage, t0, time.monotonic()) else ""
        tally.errors[f"{kind}:{type(e).__name__}{during}"] += 1
        return
    tally.statuses[f"{kind}:{status}"] += 1
    if status == 503 and in_outage(outage, t0, time.monotonic()):
        tally.outage_503 += 1  # the store was down: a refusal the caller may retry, not a lost request
    elif status >= 500 and kind in HOSTILE:
        tally.input_5xx += 1
    elif status >= 500:
        tally.lost += 1


def _json(r: httpx.Response) -> dict:
    try:
        out = r.json()
    except ValueError:
        return {"error": "not JSON"}
    return out if isinstance(out, dict) else {"error": "not an object"}


async def soak(stack: Stack, cfg: SoakConfig, progress=None, mcp: McpStack | None = None) -> Tally:
    rng = random.Random(cfg.seed)
    model = measured_model(stack).name
    examples = stack.examples
    hostile = hostile_variants(model)
    url = stack.url + "/v1/chat/completions"
    pid = stack.gateways[0][0].pid
    tally, outage = Tally(), [None, None]  # the store's outage: monotonic start and end
    started = time.monotonic()
    deadline = started + cfg.minutes * 60
    mix = {k: w for k, w in MIX.items() if mcp is not None or not k.startswith("mcp_")}
    kinds, weights = list(mix), list(mix.values())

    def request_for(kind: str, conversation: Conversation) -> Req:
        ex = examples[rng.randrange(len(examples))]
        base = chat_body(ex)
        if kind == "routed":
            return Req(url, base)
        if kind == "named":
            return Req(url, {**base, "model": model})
        if kind in ("stream", "stream_left"):
            return Req(url, {**base, "model": model, "stream": True})
        if kind == "session":
            return conversation.next_turn(rng, base, stack.url, f"soak-{cfg.seed}-{id(conversation)}")
        if kind == "console_login":
            return console_login(rng, stack.url)
        if kind.startswith("mcp_"):
            return mcp_request(rng, mcp, kind)
        out = hostile[rng.randrange(len(hostile))](base)
        return Req(url, content=out) if isinstance(out, bytes) else Req(url, out)

    async def worker(http: httpx.AsyncClient) -> None:
        conversation = Conversation()  # each worker is one agent: its session's turns come one at a time
        while time.monotonic() < deadline:
            kind = rng.choices(kinds, weights)[0]
            await one_request(http, kind, request_for(kind, conversation), tally, outage)

    async def operator(http: httpx.AsyncClient) -> None:
        """Samples RSS, reloads the router on a schedule, restarts Redis at half time."""
        next_reload, restarted = started + cfg.reload_every_s, False
        while time.monotonic() < deadline:
            now = time.monotonic()
            tally.rss_mb.append((now - started, rss_mb(pid)))
            if progress is not None:
                progress(f"{(now - started) / 60:.1f} / {cfg.minutes:g} min, {sum(tally.sent.values())} requests, "
                         f"RSS {tally.rss_mb[-1][1]:.0f} MB")
            if now >= next_reload:
                r = await http.post(stack.url + "/v1/admin/reload", json={"dir": str(Path(cfg.router_dir).resolve())})
                tally.reloads[str(r.status_code)] += 1
                next_reload += cfg.reload_every_s
            if not restarted and now - started >= cfg.minutes * 30 and stack.redis is not None:
                outage[0] = time.monotonic()
                await asyncio.to_thread(stack.redis.stop)
                await asyncio.sleep(1.0)
                await asyncio.to_thread(stack.redis.start)
                outage[1], restarted = time.monotonic(), True
            await asyncio.sleep(min(cfg.sample_every_s, max(0.0, deadline - time.monotonic())))

    limits = httpx.Limits(max_connections=cfg.concurrency + 2, max_keepalive_connections=cfg.concurrency + 2)
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {stack.key}"}, timeout=cfg.request_timeout_s,
                                 limits=limits) as http:
        await asyncio.gather(operator(http), *(worker(http) for _ in range(cfg.concurrency)))
    tally.rss_mb.append((time.monotonic() - started, rss_mb(pid)))
    return tally


def billed_usd(stack: Stack) -> tuple[float, int]:
    """What the replay upstreams would have billed: every completion served × its recorded usage × the pool's
    price; and how many completions had no priceable usage (not included)."""
    by_recording = {m.recording: m.name for m in stack.pool.models}
    total, unpriced = 0.0, 0
    for server in stack.servers.values():
        _, completions = server.state.counts()
        for (recording, example_id), n in completions.items():
            rec = stack.recordings.get(recording, {}).get(example_id)
            cost = stack.pool.cost_usd(by_recording[recording], rec.usage) if rec is not None else None
            if cost is None:
                unpriced += n
            else:
                total += n * cost
    return total, unpriced


def ledger(stack: Stack) -> dict:
    r = httpx.get(stack.url + "/v1/admin/spend", params={"key": "bench"}, timeout=30,
                  headers={"authorization": f"Bearer {stack.key}"})
    r.raise_for_status()
    totals = r.json()["totals"]
    by_kind: Counter = Counter()
    for t in totals:
        by_kind.update(t["by_kind"])
    return {"usd": sum(t["usd"] for t in totals), "by_kind": dict(by_kind)}


def run_soak(cfg: SoakConfig, progress=None) -> dict:
    with tempfile.TemporaryDirectory(prefix="soak-mcp-") as work, \
            McpStack(Path(work), fleet_tools(cfg.mcp_tools, cfg.data_root)) as mcp, \
            cfg.stack(requests=200, concurrency=cfg.concurrency, state="redis") as stack:
        tally = asyncio.run(soak(stack, cfg, progress, mcp))
        time.sleep(1.0)  # the last streams' background settlement
        spent, (billed, unpriced) = ledger(stack), billed_usd(stack)
        reserve_max = stack.examples and max(
            _worst(stack, chat_body(e)) for e in stack.examples[:50])
    return summarise(cfg, tally, spent, billed, unpriced, reserve_max)


def _worst(stack: Stack, body: dict) -> float:
    """An upper bound of one routed request's reservation: every pool model at twice this body's size (a
    prompt-style payload carries the functions again), priced with the gateway's own estimate settings."""
    from serving.core.budget import call_worst_case_usd
    from serving.core.state import StateSettings

    state = StateSettings()  # the bench's gateway runs with the default estimate settings
    size = len(json.dumps(body).encode()) * 2
    return sum(call_worst_case_usd(stack.pool, m.name, body, size, chars_per_token=state.chars_per_token,
                                   default_output_tokens=state.default_output_tokens) for m in stack.pool.models)


def summarise(cfg: SoakConfig, tally: Tally, spent: dict, billed: float, unpriced: int, reserve_max: float) -> dict:
    warm = [mb for t, mb in tally.rss_mb if t >= cfg.warmup_fraction * cfg.minutes * 60]
    first, peak = (warm[0], max(warm)) if warm else (float("nan"), float("nan"))
    abandoned = spent["by_kind"].get("abandoned", 0.0)
    over = spent["usd"] - billed
    return {
        "config": config_record(cfg),
        "requests": sum(tally.sent.values()), "sent": dict(tally.sent), "statuses": dict(tally.statuses),
        "input_5xx": tally.input_5xx, "lost": tally.lost, "errors": dict(tally.errors), "outage_503": tally.outage_503,
        "mcp_rpc_errors": tally.rpc_errors, "sessions_continued": tally.sessions_continued,
        "reloads": dict(tally.reloads),
        "rss_mb": [(round(t, 1), round(mb, 1)) for t, mb in tally.rss_mb],
        "rss_after_warmup_mb": {"first": first, "peak": peak, "growth": (peak - first) / first if first else None},
        "ledger_usd": spent["usd"], "ledger_by_kind": spent["by_kind"], "billed_usd": billed,
        "unpriced_completions": unpriced, "ledger_minus_billed_usd": over, "abandoned_usd": abandoned,
        "one_reservation_usd": reserve_max,
        "checks": {
            "rss_flat": bool(first == first and (peak - first) / first <= RSS_TOLERANCE),
            "no_input_5xx": tally.input_5xx == 0, "none_lost": tally.lost == 0,
            "ledger_not_below_billed": over >= -1e-9,
            "ledger_within_bound": over <= abandoned + reserve_max + 1e-9,
        },
    }


def to_markdown(s: dict) -> str:
    rss = s["rss_after_warmup_mb"]
    checks = ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in s["checks"].items())
    head = ["RSS after warm-up, first → peak MB", "5xx to input", "lost", "503 in the store outage", "ledger $",
            "billed $", "ledger − billed $ (abandoned streams' worst cases $)"]
    row = [f"{rss['first']:.0f} → {rss['peak']:.0f} ({(rss['growth'] or 0):+.1%})", s["input_5xx"], s["lost"],
           s["outage_503"], f"{s['ledger_usd']:.4f}", f"{s['billed_usd']:.4f}",
           f"{s['ledger_minus_billed_usd']:+.4f} ({s['abandoned_usd']:.4f})"]
    return "\n".join([
        f"`switchcraft bench soak` — {s['config']['minutes']:g} min at concurrency {s['config']['concurrency']}: "
        f"{s['requests']} requests ({', '.join(f'{k} {v}' for k, v in sorted(s['sent'].items()))}), reloads "
        f"{s['reloads']}, one Redis restart", "", *md_table(head, [row], "lrrrrrl"), "", f"checks: {checks}"])


def write_results(s: dict, out: Path) -> None:
    """The table, its .json, and the RSS over time as .png beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    write_outputs(out, to_markdown(s), s)
    t, mb = np.array(s["rss_mb"]).reshape(-1, 2).T
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(t / 60, mb)
    ax.set(xlabel="minutes", ylabel="gateway RSS (MB)", title="switchcraft bench soak")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    plt.close(fig)
