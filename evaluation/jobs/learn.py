"""Learn from served traffic: the decision log → consensus labels → a new router and strategy policy → a router
directory ready to serve, compared with the one in service on held-out logged requests.

    switchcraft learn --from-log runs/gateway/log --run-dir runs/learned [--pool configs/pool.yaml]
    switchcraft learn --from-log postgresql://learn@db:5432/switchcraft --run-dir runs/learned   # a fleet's log
    curl -X POST -H "authorization: Bearer $ADMIN_KEY" -d '{"dir": "runs/learned/router_onnx"}' .../v1/admin/reload

The log must keep request text (`log.requests: true`) and hold every pool model's answer on the requests it
learns from (exploration, `explore.rate`, provides them). Steps:
1. the log is read in bounded memory (`data.logged.read_explored`: only the requests every pool model answered are
   kept, the newest `max_explored` of them (MAX_EXPLORED, `--max-explored`), the others counted in SQL) and becomes the offline pipeline's own contracts: `examples.parquet` (one per
   such request; no expected answer is known, `meta.expected_unknown`) and `outputs.parquet` (their logged
   answers, decoded as served);
2. consensus labels (`data.consensus`): each (request, model) labelled from agreement in meaning (the agreement
   checks on every core from PARALLEL_LABELS requests on; the same labels);
3. the last `holdout` share of requests (by time) is held out; the router is trained on the rest (the usual
   recipe, configs/train.yaml, on consensus labels, no auxiliary targets) and the strategy policy fitted on its
   out-of-fold probabilities (`training.policy.write_strategy_policy`), then exported to ONNX (`router_onnx/`). Its cost target
   is `--budget` USD per million requests when given (recommended: consensus labels can swap two near-tied top
   models, and "20% of the best single model's cost" then moves with their price ratio; docs/consensus.md),
   else 20% of the cost of the model the consensus labels rank first;
4. on the held-out requests, the new router's decisions are replayed on the logged answers
   (`training.policy.replay`: the gateway's rules, each strategy's kind in `training.policy.kinds`) and compared with what the
   router in service did: accuracy scored with consensus labels, and with the verifier's true labels where the
   caller's `metadata.example_id` names a BFCL v1 query (`--data-root`), cost from the logged calls;
5. the rollout verdict: "keep" (the router in service stays) when the learned router is less accurate or dearer
   beyond the paired 95% intervals, else "roll_out"; written into `router_onnx/router.json` (`rollout`), where
   `POST /v1/admin/reload` reads it and refuses a "keep" router unless `{"force": true}`.
Results: `<run-dir>/learn.json` (with each stage's seconds and peak memory) and the printed table; `switchcraft
learn` exits 3 on "keep". The encoder runs on a GPU where torch sees one (training.recipe's accelerator).
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from data.errors import DataError
from data.pool import Pool, load_pool
from data.logged import complete_rows, explored_contracts, is_log_url, read_explored, redact_url
from data.schema import Example, Output, write_examples, write_outputs
from evaluation.offline.stats import paired_bootstrap
from training.policy.replay import replay


MIN_COMPLETE = 40  # requests every pool model answered: fewer leave too little to train, hold out and compare
PARALLEL_LABELS = 2000  # explored requests from which the agreement checks run on every core (below: one process)
# The learning window: the newest explored requests learned from. Memory and every stage after the read grow with
# it, not with the log (docs/learning.md: what it costs, how to raise it).
MAX_EXPLORED = 5_000


@dataclass
class LearnResult:
    run_dir: Path
    router_dir: Path
    onnx_dir: Path
    n_requests: int
    n_train: int
    n_holdout: int
    agreement: dict | None
    comparison: dict = field(default_factory=dict)
    timings_s: dict = field(default_factory=dict)
    peak_rss_mb: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------- time and memory per stage

class Stages:
    """Runs the job's stages, each under a rule, keeping its wall seconds and its peak resident memory (MiB): the
    process's high-water mark, reset at the stage's start where Linux allows it (/proc/self/clear_refs), else the
    process's peak so far; `start_mb`: the resident size at the stage's start (where the reset works). (The labelling workers' own memory is not in it: a child's peak as Linux reports it
    starts from its parent's resident size at the fork.)"""

    def __init__(self, console) -> None:
        self.console, self.seconds, self.peak_mb, self.start_mb = console, {}, {}, {}

    def __call__(self, name: str, fn):
        self.console.rule(f"[bold]{name}")
        reset_peak_rss()
        self.start_mb[name] = round(peak_rss_mb(), 1)  # just reset: the resident size now
        t0 = time.perf_counter()
        out = fn()
        self.seconds[name] = round(time.perf_counter() - t0, 2)
        self.peak_mb[name] = round(peak_rss_mb(), 1)
        return out


def reset_peak_rss() -> bool:
    """Reset this process's peak resident memory (Linux); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """This process's peak resident memory since start or the last reset, MiB."""
    try:
        with open("/proc/self/status") as f:
            return int(re.search(r"VmHWM:\s+(\d+) kB", f.read())[1]) / 1024
    except (OSError, TypeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------- the comparison on held-out requests

def compare_on_holdout(held: list[Example], outputs: list[Output], labels: pd.DataFrame, onnx_dir: Path,
                       pool: Pool, truth: dict[tuple[str, str], bool] | None) -> dict:
    """The router in service (what the log says it did) against the new router (its decisions replayed)."""
    from data.verify.agree import effective_calls
    from serving.client import RouterClient

    client = RouterClient.from_dir(onnx_dir, threads=1)
    by = {(o.example_id, o.model): o for o in outputs}
    lab = {(r.example_id, r.model): bool(r.correct) for r in labels.itertuples()}
    cost_of = {(r.example_id, r.model): float(r.cost_usd) if r.cost_usd == r.cost_usd else 0.0
               for r in labels.itertuples()}
    price = {m: float(np.nanmean([cost_of.get((e.id, m), np.nan) for e in held] or [np.nan])) for m in pool.names}
    rows = []
    for e in held:
        answers = {m: effective_calls(by[(e.id, m)].calls, by[(e.id, m)].decode_error) for m in pool.names}
        correct = {m: lab[(e.id, m)] for m in pool.names}
        cost = {m: cost_of.get((e.id, m), 0.0) for m in pool.names}
        decision = client.route(e.messages, e.tools).decision
        new_ok, new_cost = replay(decision.strategy, answers, correct, cost, e.tools, price)
        served_by = e.meta.get("answered_by")
        row = {"example": e.id, "in_service_correct": correct.get(served_by, False),
               "in_service_cost": float(e.meta.get("cost_usd") or 0.0), "new_correct": new_ok, "new_cost": new_cost,
               "new_strategy": decision.strategy.name}
        bench_id = e.meta.get("example_id")
        if truth is not None and bench_id and all((bench_id, m) in truth for m in pool.names):
            true = {m: truth[(bench_id, m)] for m in pool.names}
            row["in_service_true"] = true.get(served_by, False)
            row["new_true"] = replay(decision.strategy, answers, true, cost, e.tools, price)[0]
        rows.append(row)
    frame = pd.DataFrame(rows)
    out: dict = {"n": len(frame), "router_version": client.version, "in_service": {}, "new": {}}
    for scoring, labels_col in (("consensus", "correct"), ("true", "true")):
        scored = frame.dropna(subset=[f"new_{labels_col}"]) if f"new_{labels_col}" in frame else frame.iloc[:0]
        if scored.empty:
            continue
        ci = paired_bootstrap({who: (scored[f"{who}_{labels_col}"].to_numpy(float), scored[f"{who}_cost"].to_numpy(float))
                               for who in ("in_service", "new")}, reference="in_service")
        for who in ("in_service", "new"):
            out[who][f"accuracy_{scoring}"] = _mean_ci(scored[f"{who}_{labels_col}"], ci[who].accuracy)
            out[who]["usd_per_million"] = float(frame[f"{who}_cost"].mean() * 1e6)
            if scoring == "true":
                out[who]["n_true"] = int(len(scored))
        diff = scored[f"new_{labels_col}"].astype(float) - scored[f"in_service_{labels_col}"].astype(float)
        out[f"new_minus_in_service_{scoring}"] = _mean_ci(diff, ci["new"].delta_accuracy)
        if scoring == "consensus":  # cost does not depend on the labels: one paired difference, over every row
            dearer = (frame["new_cost"] - frame["in_service_cost"]) * 1e6
            out["new_minus_in_service_usd_per_million"] = _mean_ci(dearer, ci["new"].delta_usd_per_million)
    return out


def rollout_verdict(comparison: dict) -> dict:
    """Whether the learned router may replace the one in service: not if it is less accurate beyond the paired
    interval (the verifier's labels where the held-out requests have them, else consensus) or dearer beyond it.
    `verdict` is "roll_out" or "keep"; `why` says which figure decided."""
    scoring = "true" if comparison.get("new_minus_in_service_true") else "consensus"
    acc, usd = comparison.get(f"new_minus_in_service_{scoring}"), comparison.get("new_minus_in_service_usd_per_million")
    out = {"scoring": scoring, "delta_accuracy": acc, "delta_usd_per_million": usd, "n": comparison.get("n")}
    if acc is None or usd is None:
        return {**out, "verdict": "keep", "why": "no held-out request could be compared"}
    if acc["high"] < 0:
        why = (f"less accurate than the router in service ({scoring} labels): Δ {acc['mean']:+.3f} "
               f"[{acc['low']:+.3f}, {acc['high']:+.3f}]")
        return {**out, "verdict": "keep", "why": why}
    if usd["low"] > 0:
        why = (f"dearer than the router in service: Δ ${usd['mean']:+,.0f}/M [{usd['low']:+,.0f}, {usd['high']:+,.0f}] "
               f"(accuracy Δ {acc['mean']:+.3f} [{acc['low']:+.3f}, {acc['high']:+.3f}])")
        return {**out, "verdict": "keep", "why": why}
    return {**out, "verdict": "roll_out", "why": f"neither less accurate nor dearer beyond the paired intervals "
                                               f"(accuracy Δ {acc['mean']:+.3f}, ${usd['mean']:+,.0f}/M)"}


def stamp_rollout(onnx_dir: Path, verdict: dict) -> None:
    """The verdict in the learned router's router.json (`rollout`): /v1/admin/reload refuses a router marked
    "keep" unless forced."""
    path = Path(onnx_dir) / "router.json"
    info = json.loads(path.read_text())
    info["rollout"] = verdict
    path.write_text(json.dumps(info, indent=2, default=str))


def _mean_ci(values, interval) -> dict:
    """The mean and its paired-bootstrap interval (evaluation.offline.stats.paired_bootstrap)."""
    return {"mean": float(np.mean(np.asarray(values, dtype=float))), "low": float(interval.low),
            "high": float(interval.high)}


def true_labels(held: list[Example], outputs: list[Output], pool: Pool, data_root: Path | None) -> dict | None:
    """The verifier's labels of the held-out answers whose request names a BFCL v1 query (`metadata.example_id`)."""
    if data_root is None or not (Path(data_root) / "bfcl_v1").exists():
        return None
    from data.labels import label_outputs
    from data.sources import read_source

    wanted = {e.meta.get("example_id") for e in held} - {None}
    bench = {x.id: x for x in read_source("bfcl_v1", str(Path(data_root) / "bfcl_v1")) if x.id in wanted}
    if not bench:
        return None
    by_request = {e.id: e.meta.get("example_id") for e in held}
    renamed = [o.model_copy(update={"example_id": by_request[o.example_id]}) for o in outputs
               if by_request.get(o.example_id) in bench]
    return {(lb.example_id, lb.model): bool(lb.correct) for lb in label_outputs(renamed, bench, pool)}


def too_few_explored(complete: int, logged: int) -> str:
    """What learn says when too few logged requests were answered by every pool model, with how many more to serve
    at the log's own explored share."""
    share = complete / logged if logged else 0.0
    more = (f"about {math.ceil((MIN_COMPLETE - complete) / share):,} more logged requests at this log's explored "
            f"share ({share:.1%})" if share else "no request was explored so far")
    return (f"only {complete} of {logged:,} logged requests were answered by every pool model (exploration asks them "
            f"all); at least {MIN_COMPLETE} are needed: {more}")


# ------------------------------------------------------------------------------------------------ the job

def learn(log_path: str | Path, run_dir: str | Path, *, pool_path: str | Path = "configs/pool.yaml",
          train_config: str | Path = "configs/train.yaml", train_overrides: list[str] | None = None,
          holdout: float = 0.25, data_root: str | Path | None = None, progress: bool = True,
          budget_usd_per_million: float | None = None, max_explored: int | None = MAX_EXPLORED,
          console=None) -> LearnResult:
    from rich.console import Console

    from data.consensus import run_consensus_labels
    from data.schema import read_labels
    from evaluation.offline.routing_eval import RoutingData, oof_matrix
    from evaluation.offline.consensus_eval import menu_apart
    from training.config import load_train_config
    from training.export import export_router
    from training.policy.fit import write_strategy_policy
    from training.policy.simulate import CascadeData
    from training.recipe import OOF_FILE, run_training

    console = console or Console()
    if not 0 < holdout < 1:
        raise DataError(f"--holdout {holdout}: give a share in (0, 1)", field="holdout")
    if budget_usd_per_million is not None and not budget_usd_per_million > 0:
        raise DataError(f"--budget {budget_usd_per_million}: give USD per million requests, > 0", field="budget")
    run, step = Path(run_dir), Stages(console)
    shown = redact_url(log_path) if is_log_url(log_path) else log_path  # never a password in a message or record
    run.mkdir(parents=True, exist_ok=True)
    pool = load_pool(pool_path)

    def read():  # the log → the requests every pool model answered, their outputs, held-out split, on disk
        logged, explored, complete, outputs = read_complete(log_path, pool, max_explored)
        window = f"; learning from the newest {len(complete):,}" if len(complete) < explored else ""
        console.print(f"{logged:,} logged requests with text, {explored:,} answered by all {len(pool.names)} pool "
                      f"models{window}", highlight=False)
        if len(complete) < MIN_COMPLETE:
            raise DataError(too_few_explored(len(complete), logged), path=shown,
                            hint="serve with log.requests=true and explore.rate > 0 (e.g. 0.05), or raise "
                                 "explore.rate or explore.usd_per_day, then learn again")
        n_hold = max(10, int(round(holdout * len(complete))))
        write_examples(run / "examples.parquet", complete)
        write_examples(run / "train_examples.parquet", complete[:-n_hold])
        write_outputs(run / "outputs.parquet", outputs)
        return logged, explored, complete, outputs, complete[:-n_hold], complete[-n_hold:]

    logged, explored, complete, outputs, train, held = step("read log", read)
    workers = (os.cpu_count() or 1) if len(complete) >= PARALLEL_LABELS else 1
    consensus = step("consensus labels", lambda: run_consensus_labels(
        pool_path, run / "outputs.parquet", run / "examples.parquet", run, workers=workers))
    folds = min(5, max(2, len(train) // 20))
    cfg = load_train_config(train_config, [f"run_dir={run}", f"labels={consensus.labels_path}",
                                           f"examples={run / 'train_examples.parquet'}", f"pool={pool_path}",
                                           "aux.outputs=null", f"folds={folds}", f"progress={str(progress).lower()}",
                                           *(train_overrides or [])])
    console.print(f"training: {cfg.folds}-fold on {len(train):,} requests", highlight=False)
    step("train", lambda: run_training(cfg))
    router = cfg.router_dir

    def policy():
        oof = pd.read_parquet(run / OOF_FILE)
        probs_folds = oof_matrix(oof, sorted(set(oof["example_id"])), pool.names)[1]
        labels = [lb for lb in read_labels(consensus.labels_path) if lb.example_id in probs_folds]
        train_by_id = {e.id: e for e in train}
        data = RoutingData.from_labels(labels, train_by_id, pool.names, probs_folds)
        fitted = set(data.example_ids)  # once: built per output it made this stage quadratic in the requests
        cd = CascadeData.from_outputs([o for o in outputs if o.example_id in fitted], train_by_id, pool, data)
        return write_strategy_policy(router, cd, oof_matrix(oof, data.example_ids, data.models)[0],
                                     budget_usd_per_million=budget_usd_per_million,
                                     specs=menu_apart(cd, cd.data.correct))  # its labels are consensus labels

    step("strategy policy", policy)
    onnx_dir = run / "router_onnx"
    step("export", lambda: export_router(router, onnx_dir, requests=[(e.messages, e.tools) for e in held[:16]],
                                         int8=False, threads=1))
    labels_frame = pd.read_parquet(consensus.labels_path)
    truth = true_labels(held, outputs, pool, Path(data_root) if data_root else None)
    comparison = step("compare on held-out requests",
                      lambda: compare_on_holdout(held, outputs, labels_frame, onnx_dir, pool, truth))
    comparison["rollout"] = rollout_verdict(comparison)
    stamp_rollout(onnx_dir, comparison["rollout"])
    result = LearnResult(run, router, onnx_dir, logged, len(train), len(held), consensus.agreement,
                         comparison, step.seconds, step.peak_mb)
    (run / "learn.json").write_text(json.dumps({
        "command": "switchcraft learn", "log": str(shown), "pool": str(pool_path), "requests": logged,
        "explored": explored, "max_explored": max_explored, "complete": len(complete), "train": len(train), "holdout": len(held), "router_onnx": str(onnx_dir),
        "comparison": comparison, "timings_s": step.seconds, "peak_rss_mb": step.peak_mb,
        "start_rss_mb": step.start_mb, "label_workers": workers},
        indent=1, default=str))
    return result


def read_complete(log_path: str | Path, pool: Pool, max_explored: int | None = None,
                  ) -> tuple[int, int, list[Example], list[Output]]:
    """(logged requests with text, how many every pool model answered, the newest `max_explored` of those, oldest
    first, and their outputs), read in bounded memory: only the kept requests' rows are held
    (data.logged.read_explored)."""
    part = read_explored(log_path, pool.names, max_explored=max_explored)
    examples, outputs = explored_contracts(part, pool)
    complete = sorted(complete_rows(examples, outputs, pool), key=lambda e: e.meta["ts"])
    ids = {e.id for e in complete}
    return part.logged, part.explored, complete, [o for o in outputs if o.example_id in ids]
