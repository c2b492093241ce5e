"""The whole learning loop on loopback, on replayed BFCL v1 traffic: serve → log + explore → learn → reload → score.

    switchcraft bench loop --requests 200 --score 200 --add-model llama-3-70b-instruct --out runs/loop

What a user does on their own traffic (README, "Your own traffic"), run end to end against replay servers
that answer with the recorded outputs of the pool's models:
1. the gateway serves the first `requests` BFCL v1 queries (a router in service, the decision log with request
   text, exploration on: every pool model answers every logged request, in the operator's budget);
   with `add_model`, that model is added to the pool file partway (the gateway restarted on the new pool file,
   as an operator would): exploration asks it first, and learning routes to it;
2. `switchcraft learn` on the log: consensus labels, a new router and strategy policy, router_onnx/;
3. the new router is loaded into the running gateway (POST /v1/admin/reload);
4. the next `score` queries are served and every answer is scored with the verifier's true labels (the caller
   sent `metadata.example_id`), against the same queries served by the router that was in service.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import yaml

from data.pool import Pool, PoolModel, load_pool

LOOP_KEY = "sk-sc-loop-admin-key-0123456789abcdef"
PROVIDER_KEY = "sk-loop-provider-key-0123456789"
LOOP_KEY_ENV = "SWITCHCRAFT_LOOP_PROVIDER_KEY"  # self-hosted pool models have no key; the replay server wants one


@dataclass
class LoopResult:
    learn: dict
    before: dict  # the router in service, on the scored queries
    after: dict  # the learned router, on the same queries
    router_versions: tuple[str, str]
    added_model: str | None
    added_model_answers: int  # answers the added model gave before learning (exploration)


def chat_body(example) -> dict:
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": t.parameters}} for t in example.tools]
    return {"model": "router", "messages": [{"role": m.role, "content": m.content} for m in example.messages],
            "tools": tools, "metadata": {"example_id": example.id}}


def send_all(url: str, examples: list, concurrency: int = 4) -> list[dict]:
    async def go():
        sem = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=120, headers={"authorization": f"Bearer {LOOP_KEY}"}) as http:
            async def one(e):
                async with sem:
                    r = await http.post(url + "/v1/chat/completions", json=chat_body(e))
                    return {"example_id": e.id, "status": r.status_code,
                            "answered_by": (r.json().get("switchcraft") or {}).get("answered_by")
                            if r.status_code == 200 else None,
                            "cost_usd": float(r.headers.get("x-switchcraft-cost-usd", "nan")),
                            "router_version": ((r.json().get("switchcraft") or {}).get("decision") or {}).get(
                                "router_version") if r.status_code == 200 else None}
            return await asyncio.gather(*(one(e) for e in examples))
    return asyncio.run(go())


def score(before: list[dict], after: list[dict], truth: dict[tuple[str, str], bool]) -> tuple[dict, dict]:
    """True accuracy and cost of the same queries served twice, with paired intervals (an unanswered request
    counts as wrong and free)."""
    from evaluation.offline.stats import paired_bootstrap

    def arrays(sent: list[dict]) -> tuple[np.ndarray, np.ndarray]:
        ok = [r["status"] == 200 for r in sent]
        correct = np.array([o and truth.get((r["example_id"], r["answered_by"]), False) for o, r in zip(ok, sent)],
                           dtype=float)
        return correct, np.array([r["cost_usd"] if o else 0.0 for o, r in zip(ok, sent)], dtype=float)

    rows = {"before": arrays(before), "after": arrays(after)}
    ci = paired_bootstrap(rows, reference="before")
    out = {}
    for name, sent in (("before", before), ("after", after)):
        ok = [r for r in sent if r["status"] == 200]
        (correct, cost), iv = rows[name], ci[name]
        out[name] = {"n": len(sent), "answered": len(ok), "accuracy": float(correct.mean()),
                     "accuracy_ci": [iv.accuracy.low, iv.accuracy.high], "usd_per_million": float(cost.mean() * 1e6),
                     "by_model": {m: sum(r["answered_by"] == m for r in ok) for m in sorted({r["answered_by"] for r in ok})}}
    out["after"]["minus_before_ci"] = [ci["after"].delta_accuracy.low, ci["after"].delta_accuracy.high]
    return out["before"], out["after"]


def run_loop(router_dir: Path, data_root: Path, work: Path, *, pool_path: Path = Path("configs/pool.yaml"),
             requests: int = 200, score_n: int = 200, add_model: PoolModel | None = None, add_after: float = 0.25,
             train_overrides: list[str] | None = None, seed: int = 0,
             budget_usd_per_million: float | None = None) -> LoopResult:
    from data.labels import label_outputs
    from data.recorded import import_recorded
    from data.replay.serve import ReplayServer, build_state
    from data.sources import read_source
    from evaluation.jobs.learn import learn
    from serving.client import RouterClient
    from serving.app import create_app
    from serving.gateway.config import ServingConfig
    from evaluation.harness import Loopback
    from data.logged import read_log

    work.mkdir(parents=True, exist_ok=True)
    base = load_pool(pool_path)
    full = base.model_copy(update={"models": [*base.models, add_model]}) if add_model else base
    outputs_dir = data_root / "bfcl_v1_pool_outputs_2024-08-11"
    examples = read_source("bfcl_v1", str(data_root / "bfcl_v1"))
    rng = np.random.default_rng(seed)
    picked = [examples[i] for i in rng.permutation(len(examples))[: requests + score_n]]
    traffic, scored = picked[:requests], picked[requests:]
    state = build_state(outputs_dir, picked, pool=full, api_key=PROVIDER_KEY)
    env_keys = {m.api_key_env for m in full.models if m.api_key_env} | {LOOP_KEY_ENV}
    saved = {k: os.environ.get(k) for k in env_keys | {"SWITCHCRAFT_GATEWAY_KEYS"}}
    os.environ.update({k: PROVIDER_KEY for k in env_keys})
    os.environ["SWITCHCRAFT_GATEWAY_KEYS"] = json.dumps([{"id": "loop", "key": LOOP_KEY, "role": "admin"}])
    try:
        with ReplayServer(state) as replay:
            def served_pool(p: Pool) -> Pool:
                return p.model_copy(update={"models": [m.model_copy(update={
                    "base_url": replay.base_url, "api_key_env": m.api_key_env or LOOP_KEY_ENV}) for m in p.models]})
            pool_file = work / "pool.yaml"
            pool_file.write_text(yaml.safe_dump(served_pool(full).model_dump(mode="json", exclude_none=True)))
            cfg = ServingConfig(state={"path": str(work / "state")}, log={"path": str(work / "log"), "requests": True},
                                explore={"rate": 1.0, "usd_per_day": 1000.0, "min_answers": 50, "concurrency": 64})
            client = RouterClient.from_dir(router_dir, threads=1)
            first = int(len(traffic) * add_after) if add_model else len(traffic)
            stages = [(served_pool(base), traffic[:first]), (served_pool(full), traffic[first:])]
            for p, batch in stages:
                if not batch:
                    continue
                app = create_app(cfg, client=client, pool=p)
                with Loopback(app, start_timeout_s=60) as url:
                    send_all(url, batch)
                    wait_quiet(app)
            _, answers = read_log(work / "log")
            added = sum(a["model"] == add_model.name and a["outcome"] == "ok" for a in answers) if add_model else 0
            learned = learn(work / "log", work / "learned", pool_path=pool_file, data_root=data_root,
                            train_overrides=train_overrides, progress=False,
                            budget_usd_per_million=budget_usd_per_million)
            truth_outputs = import_recorded(outputs_dir, examples={e.id: e for e in scored},
                                            models=[m.recording for m in full.models], progress=False)
            truth = {(lb.example_id, lb.model): bool(lb.correct)
                     for lb in label_outputs(truth_outputs, {e.id: e for e in scored}, full)}
            app = create_app(ServingConfig(), client=client, pool=served_pool(full))
            with Loopback(app, start_timeout_s=60) as url:
                sent_before = send_all(url, scored)
                # The loop scores the learned router whatever learn's rollout verdict (LoopResult.learn["rollout"]):
                # measuring it is the point; an operator's reload would refuse a "keep" without force.
                r = httpx.post(url + "/v1/admin/reload", json={"dir": str(learned.onnx_dir), "force": True},
                               headers={"authorization": f"Bearer {LOOP_KEY}"}, timeout=120)
                if r.status_code != 200:
                    raise RuntimeError(f"reload failed: {r.text}")
                before, after = score(sent_before, send_all(url, scored), truth)
            return LoopResult(learned.comparison, before, after, (r.json()["previous_version"],
                                                                   r.json()["router_version"]),
                              add_model.name if add_model else None, added)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wait_quiet(app, timeout_s: float = 300.0) -> None:
    """Exploration and the log's writer finish after the answers went out: wait until both are idle."""
    deadline = time.monotonic() + timeout_s
    for o in app.state.observers:
        while getattr(o, "tasks", None) and time.monotonic() < deadline:
            time.sleep(0.05)
        queue = getattr(o, "queue", None)
        while queue is not None and not queue.empty() and time.monotonic() < deadline:
            time.sleep(0.05)
    time.sleep(0.3)  # the last batch's write


def model_to_add(name: str | None):
    """The pool model named `name` in one of configs/pools/*.yaml (None for None)."""
    if name is None:
        return None
    for f in sorted(Path("configs/pools").glob("*.yaml")):
        for m in load_pool(f).models:
            if m.name == name:
                return m
    raise ValueError(f"--add-model {name}: not in any configs/pools/*.yaml")


def main(router: Path, data_root: Path, out: Path, *, requests: int = 200, score: int = 200,
         add_model: str | None = None) -> LoopResult:
    """`switchcraft bench loop`: run the loop, write loop.json into `out`."""
    res = run_loop(router, data_root, out, requests=requests, score_n=score, add_model=model_to_add(add_model))
    out.mkdir(parents=True, exist_ok=True)
    (out / "loop.json").write_text(json.dumps(res.__dict__, indent=1, default=str))
    return res
