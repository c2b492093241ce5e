"""Latency of routing one request over a 5,000-tool catalog (BFCL's tools topped up with Seal-Tools'), query
embedding included.

    switchcraft bench tools [--set retrieval.max_intents=1] [--out bench_fast.json]   # → runs/tools/bench.json
    switchcraft bench tools --stages 0.3 --out stages.json   # thread-CPU ms per stage; sibling fill vs not

Method and figures: docs/tool_routing.md ("Latency").
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from pathlib import Path

import numpy as np

from evaluation.bench._support import percentiles, write_json

SOURCES = ("bfcl", "seal_tools")
NAMESPACES = {"seal_tools": "seal"}  # every source but the first gets one, so that no key collides with the first's


def bench_index(n_tools: int, data_root: str, run_dir: Path, cfg, sources: tuple[str, ...] = SOURCES):
    """(ToolIndex over the first `n_tools` cards of `sources`, a fifth of them restricted, with group vectors and
    schema token counts; the distinct queries) with the config's encoder (trained, or the base MiniLM)."""
    from evaluation.tools.data import read_benchmark
    from serving.tools.cards import split_identifier
    from serving.tools.catalog import Catalog
    from serving.tools.index import ToolIndex, checked_model_dir

    cards, vecs, queries = [], [], []
    for name in sources:
        bench = read_benchmark(name, data_root)
        built = ToolIndex.build(bench.catalog, run_dir / "index", model_dir=checked_model_dir(cfg.encoder, "encoder"),
                                query_model_dir=checked_model_dir(cfg.query_encoder, "query_encoder"),
                                query_precision=cfg.retrieval.query_precision,
                                query_threads=cfg.retrieval.query_threads)
        queries += [q.text for q in bench.queries]
        for card, v in list(zip(bench.catalog.cards, built.tool_vecs))[: n_tools - len(cards)]:
            cards.append(card if name == sources[0] else card.model_copy(update={
                "namespace": NAMESPACES.get(name, name)}))
            vecs.append(v)
    restricted = set(random.Random(0).sample(range(len(cards)), len(cards) // 5))
    catalog = Catalog([c.model_copy(update={"permissions": ["restricted.use"]}) if i in restricted else c
                       for i, c in enumerate(cards)])
    groups = [catalog.groups[g] for g in catalog.group_names()]
    group_vecs = built.encoder.encode([f"{split_identifier(g.name)}: {g.description}" for g in groups])
    tokens = np.array([built.encoder.count_tokens(json.dumps(c.to_openai())) for c in catalog.cards])
    return (ToolIndex(catalog, built.encoder, np.stack(vecs), group_vecs, tokens, query_encoder=built.query_encoder),
            list(dict.fromkeys(queries)))


def bench_router(n_tools, n_queries, data_root, run_dir, config, overrides, sources, **retrieval):
    """(config, ToolRouter, the caller, the timed queries, ms of the caller's first visibility filter) after 20
    warm-up routes (ORT session, BM25, caches)."""
    from serving.tools.config import load_tools_config
    from serving.tools.policy import AccessPolicy, Caller
    from serving.tools.router import ToolRouter

    cfg = load_tools_config(config, list(overrides))
    index, queries = bench_index(n_tools, data_root, Path(run_dir), cfg, sources)
    router = ToolRouter(index, AccessPolicy(), cfg.retrieval.model_copy(update=retrieval), cfg.groups)
    caller = Caller(tenant="bench", roles=("analyst",))
    sample = random.Random(1).sample(queries, min(n_queries + 20, len(queries)))
    t = time.perf_counter()
    router.visible(caller)
    cold_filter_ms = (time.perf_counter() - t) * 1e3
    for q in sample[:20]:
        router.route(q, caller)
    return cfg, router, caller, sample[20:], cold_filter_ms


def run(n_tools: int = 5000, n_queries: int = 1000, data_root: str = "../shared/data", run_dir: str = "runs/tools",
        config: str | None = "configs/tools.yaml", overrides: list[str] = (), out_name: str = "bench.json",
        sources: tuple[str, ...] = SOURCES) -> dict:
    cfg, router, caller, sample, cold_filter_ms = bench_router(n_tools, n_queries, data_root, run_dir, config,
                                                               overrides, sources)
    totals, cpu, stages, by_asks = [], [], {}, {}
    for q in sample:
        t, c = time.perf_counter(), time.process_time()
        d = router.route(q, caller)
        totals.append((time.perf_counter() - t) * 1e3)
        # CPU time of this process: what a route costs without other processes preempting it (on a shared machine
        # wall-clock percentiles mostly measure the queue)
        cpu.append((time.process_time() - c) * 1e3)
        by_asks.setdefault("one ask" if not d.intents else "several asks", []).append(totals[-1])
        for k, v in d.timings_ms.items():
            stages.setdefault(k, []).append(v)
    pct = lambda xs, qs=(50, 90, 99): percentiles(xs, qs, key="p{}", ndigits=3)  # noqa: E731
    enc = router.index.query_encoder
    result = {
        "tools": len(router.catalog), "visible_tools": int(router.visible(caller).visible.sum()),
        "queries": len(totals), "query_encoder": f"{type(enc).__name__} {enc.name} ({cfg.retrieval.query_precision})",
        "encoder": router.index.encoder.name, "ms": {**pct(totals), "max": round(max(totals), 3)},
        "cpu_ms": {**pct(cpu), "max": round(max(cpu), 3)}, "config": config, "overrides": list(overrides),
        "retrieval": cfg.retrieval.model_dump(),
        "by_asks_ms": {k: {"requests": len(v), **pct(v, (50, 99))} for k, v in by_asks.items()},
        "stage_ms_p50": {k: pct(v, (50,))["p50"] for k, v in stages.items()},
        "stage_ms_p99": {k: pct(v, (99,))["p99"] for k, v in stages.items()},
        "cold_filter_ms": round(cold_filter_ms, 2), "load_average": os.getloadavg(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(Path(run_dir, out_name), result)
    return result


def stage_cpu(n_tools: int = 5000, n_queries: int = 1000, data_root: str = "../shared/data", run_dir: str = "runs/tools",
              config: str | None = "configs/tools.yaml", overrides: list[str] = (), head: float = 0.3,
              rounds: int = 3, sources: tuple[str, ...] = SOURCES) -> dict:
    """Thread-CPU ms of each stage of a route (embed, bm25, fuse, select, pick, bind; pick with sibling fill at `head`)
    one at a time on the calling thread, the stages after the embedding `rounds` times on the same inputs (their
    median); `route_without_embed` sums bm25 … bind, `route` adds the embedding."""
    from serving.tools.config import SiblingFill
    from serving.tools.router import ToolRouter

    cfg, off, caller, sample, _ = bench_router(n_tools, n_queries, data_root, run_dir, config, overrides, sources,
                                               sibling_fill=None)
    on = ToolRouter(off.index, off.policy, cfg.retrieval.model_copy(update={"sibling_fill": SiblingFill(head=head)}),
                    cfg.groups)
    seen, group_visible = off._visible(caller)
    clock, changed = time.thread_time, 0
    st: dict[str, list[float]] = {s: [] for s in ("embed", "bm25", "fuse", "select", "pick", "bind",
                                                  "pick_sibling_fill", "route_without_embed", "route")}
    for q in sample:
        texts = off.intents(q)
        t = clock()
        Q = off._vectors(texts, None)
        st["embed"].append((clock() - t) * 1e3)
        asks = len(texts) - 1
        k = max(cfg.retrieval.top_k, cfg.retrieval.k_per_intent * asks)
        reps: dict[str, list[float]] = {}
        for _ in range(rounds):
            t0 = clock()
            bm25 = [off.index.bm25_scores(x) for x in texts]
            t1 = clock()
            fused, dense = off.fuse(texts, Q, seen.visible, bm25, [{} for _ in texts])
            t2 = clock()
            chosen, _, probs = off._select_groups(fused, dense, Q, seen.visible, max(cfg.groups.max_groups, asks))
            t3 = clock()
            a = off._pick(fused, chosen, seen.visible, k)
            t4 = clock()
            bound = [off.catalog.cards[int(i)].to_openai() for i in a]
            bound += [off._request_group_tool(chosen, probs, group_visible)[0], int(off.index.schema_tokens[a].sum())]
            t5 = clock()
            b = on._pick(fused, chosen, seen.visible, k)
            t6 = clock()
            for name, v in (("bm25", t1 - t0), ("fuse", t2 - t1), ("select", t3 - t2), ("pick", t4 - t3),
                            ("bind", t5 - t4), ("pick_sibling_fill", t6 - t5), ("route_without_embed", t5 - t0)):
                reps.setdefault(name, []).append(v * 1e3)
        for name, v in reps.items():
            st[name].append(float(np.median(v)))
        st["route"].append(st["embed"][-1] + st["route_without_embed"][-1])
        changed += set(a.tolist()) != set(b.tolist())
    return {"tools": len(off.catalog), "visible_tools": int(seen.visible.sum()), "requests": len(st["embed"]),
            "rounds": rounds, "head": head, "overrides": list(overrides),
            "requests_whose_exposed_set_changes_with_sibling_fill": changed,
            "thread_cpu_ms": {k: percentiles(v, (50, 90, 99), key="p{}", ndigits=4) for k, v in st.items()},
            "load_average": os.getloadavg(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main(tools: int = 5000, queries: int = 1000, data_root: str = "../shared/data", run_dir: str = "runs/tools",
         config: str = "configs/tools.yaml", overrides: list[str] = (), out: str = "bench.json",
         stages: float | None = None) -> dict:
    """`switchcraft bench tools`: the latency record (with `stages`: the per-stage CPU record), printed as JSON and
    written to `run_dir/out`. One BLAS thread: one matrix-vector product a request, more threads would only spin."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        args = (tools, queries, data_root, run_dir, config, list(overrides))
        record = run(*args, out) if stages is None else stage_cpu(*args, stages)
    if stages is not None:  # run writes its own
        write_json(Path(run_dir, out), record)
    print(json.dumps(record, indent=2))
    return record
