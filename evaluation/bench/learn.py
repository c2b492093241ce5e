"""How `switchcraft learn` scales with the decision log: a synthetic log of N served requests, a share of them
explored (every pool model answered), then `learn` on it, each stage's wall time and peak memory.

    switchcraft bench learn --requests 100000 [--explore 0.05] [--out runs/bench_learn.md] [--whole-read]
    switchcraft bench learn --requests 1000000 --read-only --whole-read      # the read stage alone, both ways

The traffic is the console bench's (`evaluation.synthetic_log.synthetic_records`: the same seed, the same log),
with the request text the gateway keeps under `log.requests: true` added, written by the gateway's own writer
(serving/core/decision_log.py), rotated at `--max-mb` like a served log. `learn` then runs as `switchcraft learn`
does (configs/train.yaml, `--set` overrides); its stages' seconds and peak resident memory come from
`evaluation.jobs.learn.Stages`. Figures, and what they say for larger logs: docs/performance.md.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.bench._support import config_record, md_table, write_outputs

ASKS = ("What's the weather in {city}?", "Is it raining in {city} right now?", "Forecast for {city}, next 3 days",
        "Do I need an umbrella in {city} today?", "How warm is it in {city}?", "{city}: weather this weekend?")
TOOLS = [{"name": "get_weather", "description": "Current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                         "required": ["city"]}},
         {"name": "get_forecast", "description": "Weather forecast for the next days",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                          "days": {"type": "integer", "description": "1 to 10"}},
                         "required": ["city"]}}]


@dataclass
class LearnBenchConfig:
    requests: int = 100_000
    explore: float = 0.05
    out: Path = Path("runs/bench_learn.md")
    pool: Path = Path("configs/pool.yaml")
    max_mb: float = 256.0  # the log's rotation size (log.max_mb)
    days: float = 7.0
    seed: int = 0
    train: list[str] = field(default_factory=list)  # configs/train.yaml overrides
    read_only: bool = False  # only the read stage (no training): for logs too large to learn from here
    whole_read: bool = False  # also read the log whole into memory (read_log), for comparison
    max_explored: int | None = None  # learn's window (None: learn's default, MAX_EXPLORED)
    notes: list[str] = field(default_factory=list)


def request_text(rng: random.Random, answers: list[dict]) -> str:
    """The request as `log.requests: true` keeps it: a user ask about the city the first answer names."""
    from data.schema import Message, Tool

    calls = json.loads(answers[0]["calls"] or "[]") if answers else []
    city = calls[0]["arguments"]["city"] if calls else rng.choice(("Paris", "Oslo", "Lima"))
    messages = [Message(role="user", content=rng.choice(ASKS).format(city=city))]
    return json.dumps({"messages": [m.model_dump(mode="json") for m in messages],
                       "tools": [Tool.model_validate(t).model_dump(mode="json") for t in TOOLS]})


def raw_answer(row: dict, native: bool) -> str | None:
    """The raw answer as logged: a native function-calling model's tool calls as structured data (text from one
    is no call), a prompted model's as Python call text."""
    if row["calls"] is None:
        return None
    calls = json.loads(row["calls"])
    if native:
        return json.dumps([{c["name"]: json.dumps(c["arguments"])} for c in calls] or "I cannot help with that.")
    text = ", ".join(f"{c['name']}(" + ", ".join(f"{k}={v!r}" for k, v in c["arguments"].items()) + ")" for c in calls)
    return json.dumps(f"[{text}]" if calls else "I cannot help with that.")


def write_learn_log(folder: Path, pool, n: int, *, explore: float = 0.05, seed: int = 0, days: float = 7.0,
                    max_mb: float = 256.0, now: float | None = None) -> dict[str, int]:
    """A synthetic log of `n` requests with their text in `folder` (emptied first), through the gateway's writer in
    batches of 256 records (its own at most); every rotated file is kept. Returns the rows written and the files."""
    from data.logged import log_files
    from evaluation.synthetic_log import synthetic_records
    from serving.core.decision_log import DecisionLog

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("decisions*.sqlite*"):
        old.unlink()
    log, rng = DecisionLog(folder, keep_requests=True, max_mb=max_mb, keep=1_000_000), random.Random(seed)
    requests = answers = 0
    native = {m.name for m in pool.models if m.prompt_style == "native"}
    for batch in synthetic_records(pool, n, days, now=now or time.time(), explore=explore, seed=seed, batch=256):
        for _kind, row, rows in batch:
            if row is not None:
                row["request"] = request_text(rng, rows)
                requests += 1
            for a in rows:
                a["raw"] = raw_answer(a, a["model"] in native)
            answers += len(rows)
        log.write(batch)
    log.db.close()
    return {"requests": requests, "answers": answers, "files": len(log_files(folder)),
            "bytes": sum(p.stat().st_size for p in folder.glob("decisions*.sqlite*"))}


def run_learn_bench(cfg: LearnBenchConfig, progress: bool = False, console=None) -> dict[str, Any]:
    """Write the log, learn from it (or with `read_only`, only read it); every stage's seconds and peak memory
    (MiB). `whole_read`: then also today's whole-log read (`read_log` + `log_contracts`), for comparison."""
    import torch

    from data.pool import load_pool
    from evaluation.jobs.learn import MAX_EXPLORED, learn, peak_rss_mb, reset_peak_rss

    if cfg.requests < 1 or not 0 < cfg.explore <= 1:
        raise ValueError(f"--requests {cfg.requests}, --explore {cfg.explore}: give requests >= 1 and a share in "
                         "(0, 1]")
    work, pool = cfg.out.with_name(cfg.out.stem + "_work"), load_pool(cfg.pool)
    reset_peak_rss()
    t0 = time.perf_counter()
    written = write_learn_log(work / "log", pool, cfg.requests, explore=cfg.explore, seed=cfg.seed, days=cfg.days,
                              max_mb=cfg.max_mb)
    out = {"config": config_record(cfg), "log": {**written, "write_s": round(time.perf_counter() - t0, 1),
                                                 "write_peak_mb": round(peak_rss_mb(), 1)},
           "encoder_device": "cuda" if torch.cuda.is_available() else "cpu", "cpus": os.cpu_count(),
           "load_average": {"before": " ".join(f"{v:.2f}" for v in os.getloadavg())}}
    t0 = time.perf_counter()
    if cfg.read_only:
        out.update(read_stages(work / "log", pool, whole=False, console=console,
                               max_explored=cfg.max_explored or MAX_EXPLORED))
    else:
        shutil.rmtree(work / "learned", ignore_errors=True)  # no feature cache from an earlier run
        res = learn(work / "log", work / "learned", pool_path=cfg.pool, train_overrides=cfg.train,
                    progress=progress, budget_usd_per_million=1000.0, console=console,
                    max_explored=cfg.max_explored or MAX_EXPLORED)
        info = json.loads((work / "learned" / "learn.json").read_text())
        out.update({"requests": res.n_requests, "explored": info["explored"], "complete": info["complete"], "train": res.n_train,
                    "holdout": res.n_holdout, "seconds": res.timings_s, "peak_mb": res.peak_rss_mb,
                    "start_mb": info["start_rss_mb"], "label_workers": info["label_workers"]})
    out["learn_s"] = round(time.perf_counter() - t0, 1)
    if cfg.whole_read:  # last: what it leaves allocated does not weigh on the stages above
        whole = read_stages(work / "log", pool, whole=True, console=console)
        for key in ("seconds", "peak_mb", "start_mb"):
            out[key].update(whole[key])
    out["load_average"]["after"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return out


WHOLE = "read log, whole in memory (read_log)"


def read_stages(log: Path, pool, *, whole: bool, console=None, max_explored: int | None = None) -> dict[str, Any]:
    """The read stage alone, as `learn` reads (streamed), or (`whole`) as it read before: every row in memory."""
    from rich.console import Console

    from data.logged import complete_rows, log_contracts, read_log
    from evaluation.jobs.learn import Stages, read_complete

    stages = Stages(console or Console(quiet=True))
    if whole:
        stages(WHOLE, lambda: complete_rows(*log_contracts(*read_log(log), pool), pool))
        return {"seconds": stages.seconds, "peak_mb": stages.peak_mb, "start_mb": stages.start_mb}
    logged, explored, complete, _ = stages("read log", lambda: read_complete(log, pool, max_explored))
    return {"seconds": stages.seconds, "peak_mb": stages.peak_mb, "start_mb": stages.start_mb, "requests": logged,
            "explored": explored, "complete": len(complete)}


def to_markdown(result: dict[str, Any]) -> str:
    log = result["log"]
    rows = [[stage, f"{s:,.1f}", f"{result['start_mb'][stage]:,.0f}", f"{result['peak_mb'][stage]:,.0f}"]
            for stage, s in result["seconds"].items()]
    learned = "" if "train" not in result else (f", trained on {result['train']:,}, {result['holdout']:,} held out "
                                                f"(labelling workers: {result['label_workers']})")
    whole = (f" \"{WHOLE}\" is not part of `learn`: the same log read whole into memory with "
             "`read_log`, for comparison." if WHOLE in result["seconds"] else "")
    return "\n".join([
        f"`switchcraft learn` on a synthetic log of {log['requests']:,} requests ({log['answers']:,} answers, "
        f"{log['files']} file(s), {log['bytes'] / 2**20:,.0f} MiB; explore rate {result['config']['explore']:g}): "
        f"{result['explored']:,} answered by every pool model, the newest {result['complete']:,} kept{learned}.", "",
        *md_table(["stage", "seconds", "RSS at start (MiB)", "peak RSS (MiB)"],
                  [*rows, ["learn, in all" if "train" in result else "read only", f"{result['learn_s']:,.1f}", "", ""]],
                  "lrrr"), "",
        f"RSS: this process's resident memory; its peak is reset at each stage's start.{whole} Log written in {log['write_s']} s (peak RSS "
        f"{log['write_peak_mb']:,.0f} MiB); encoder on {result['encoder_device']}; {result['cpus']} CPUs; load "
        f"average before {result['load_average']['before']}, after {result['load_average']['after']}.",
        *(f"Note: {n}" for n in result["config"].get("notes") or [])]) + "\n"


def write_results(result: dict[str, Any], out: Path) -> None:
    write_outputs(out, to_markdown(result), result)
