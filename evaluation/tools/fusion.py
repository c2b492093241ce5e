"""Learn the fusion weights (BM25 vs dense, per field, RRF constant) on training queries only.

    switchcraft tools fit-fusion                          # the config's encoder → <train.out_dir>/fusion.json
    switchcraft tools fit-fusion --retriever base
    switchcraft tools fit-fusion --fields bm25,dense      # per-field weights: BM25 and dense per field

The router fuses BM25 and dense rankings per text (whole request, each ask) by
weighted reciprocal rank fusion. Only the ratio w_bm25 / w_dense matters, so
w_dense stays 1 and a grid over w_bm25 and rrf_k is scored by the router's own
multi-intent fusion (`ToolRouter.fuse`) on the `train` queries of BFCL (live),
MetaTool and Seal-Tools (dev): mean of Recall@5 and Comprehensiveness@10 (BFCL
by function name), averaged over the three so that no catalog dominates.
Held-out queries are never looked at; their figures come from `tools eval`.

Then, per field (`--fields`): starting from the grid's best, a coordinate
search over w_bm25, rrf_k and the weight of each per-field ranking (BM25 over
a card's name, description, parameters; `dense`: the cosine to each field's
embedding), one stage per signal, by the same objective; `fields.steps` in
the result gives each stage's training score and its gain over the one before.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np

from evaluation.tools.data import read_benchmark
from evaluation.tools.evaluate import base_name, intent_vectors
from evaluation.tools.metrics import comprehensive_at, recall_at
from serving.tools.cards import FIELDS
from serving.tools.config import FieldWeights, ToolsConfig
from serving.tools.index import ToolIndex, checked_model_dir, top_k
from serving.tools.policy import AccessPolicy
from serving.tools.router import ToolRouter

W_BM25 = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
RRF_K = (10.0, 30.0, 60.0, 120.0)
BENCHES = ("bfcl", "metatool", "seal_tools")
FIELD_SIGNALS = ("bm25", "dense")
FIELD_W = (0.0, 0.0625, 0.125, 0.25, 0.5, 0.75, 1.0, 1.5)
MAX_PASSES = 3


def _score(router: ToolRouter, prepared, keys, by_name: bool) -> float:
    everything = np.ones(len(keys), dtype=bool)
    vals = []
    for texts, Q, bm25, needed, *fields in prepared:  # fields: per text, per-field BM25 scores (optional)
        fused = router.fuse(texts, Q, everything, bm25, fields[0] if fields else None)[0]
        ranked = [keys[i] for i in top_k(fused, 10)]
        if by_name:
            ranked, needed = [base_name(k) for k in ranked], [base_name(k) for k in needed]
        vals.append((recall_at(ranked, needed, 5) + comprehensive_at(ranked, needed, 10)) / 2)
    return float(np.mean(vals))


def parse_fields(text: str | None) -> tuple[str, ...]:
    """`--fields bm25,dense` → ("bm25", "dense"); "" or None: no per-field search."""
    got = tuple(dict.fromkeys(p.strip() for p in (text or "").split(",") if p.strip()))
    _check_signals(got, "--fields")
    return got


def _check_signals(signals: tuple[str, ...], what: str) -> None:
    bad = [p for p in signals if p not in FIELD_SIGNALS]
    if bad:
        raise ValueError(f"{what}: unknown signal(s) {bad}; choose from {', '.join(FIELD_SIGNALS)} (comma-separated)")


def fit_fusion(cfg: ToolsConfig, data_root: str | Path, run_dir: str | Path, model_dir: str | None = None,
               query_model_dir: str | None = None, per_bench: int = 300, log=print,
               fields: tuple[str, ...] = ()) -> dict:
    """The grid's scores and the best (w_bm25, rrf_k), on at most `per_bench` training queries per benchmark;
    with `fields` ("bm25", "dense"), the per-field coordinate search after it (`result["fields"]`)."""
    _check_signals(fields, "fields")
    grid = list(itertools.product(W_BM25, RRF_K))
    scores = {g: [] for g in grid}
    fitted, used, build = training_sets(cfg, data_root, run_dir, model_dir, query_model_dir, per_bench, fields)
    for name, index, policy, prepared, keys in fitted:
        for w, k in grid:
            r = cfg.retrieval.model_copy(update={"w_bm25": w, "w_dense": 1.0, "rrf_k": k})
            scores[(w, k)].append(_score(ToolRouter(index, policy, r, cfg.groups), prepared, keys, name == "bfcl"))
        log(f"fusion grid on {name}: {len(prepared)} training queries")
    mean = {g: float(np.mean(v)) for g, v in scores.items()}
    best = max(grid, key=lambda g: (mean[g], g == (1.0, 60.0)))  # ties keep the default
    current = (cfg.retrieval.w_bm25 / cfg.retrieval.w_dense, cfg.retrieval.rrf_k)
    result = {"w_bm25": best[0], "w_dense": 1.0, "rrf_k": best[1], "objective": "mean of (R@5 + C@10) / 2 over "
              + ", ".join(BENCHES) + " (train queries; BFCL by name)", "score": mean[best],
              "score_of_config": mean.get(current), "config": {"w_bm25": current[0], "rrf_k": current[1]},
              "queries": used, "encoder": model_dir, "query_encoder": query_model_dir,
              "grid": [{"w_bm25": w, "rrf_k": k, "score": mean[(w, k)], "per_benchmark": dict(zip(BENCHES, scores[(w, k)]))}
                       for w, k in grid]}
    if fields:
        result["fields"] = field_search(cfg, fitted, best, fields, log)
        result["fields"]["build"] = build
    return result


def training_sets(cfg: ToolsConfig, data_root: str | Path, run_dir: str | Path, model_dir: str | None = None,
                  query_model_dir: str | None = None, per_bench: int = 300, fields: tuple[str, ...] = (),
                  benches: tuple[str, ...] = BENCHES):
    """Per benchmark, (name, index, policy, prepared queries, card keys) for `_score`: at most `per_bench`
    training queries, embedded as routing embeds them, with their BM25 scores (per field too with "bm25"
    in `fields`); and the queries used and the index build seconds, per benchmark."""
    run_dir = Path(run_dir)
    fitted, used, build = [], {}, {}
    for name in benches:
        bench = read_benchmark(name, data_root)
        train = [q for q in bench.queries if q.domain == "train"]
        bench.queries = random.Random(0).sample(train, min(per_bench, len(train)))
        used[name] = len(bench.queries)
        index = ToolIndex.build(bench.catalog, run_dir / "index", model_dir=checked_model_dir(model_dir, "encoder"),
                                query_model_dir=checked_model_dir(query_model_dir, "query_encoder"))
        router = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"), cfg.retrieval, cfg.groups)
        ivecs = intent_vectors(bench, router, run_dir / "cache")
        if "bm25" in fields:
            for f in FIELDS:
                index.field_bm25(f)
        if "dense" in fields:
            for f in FIELDS:
                index.field_vecs(f)
        build[name] = {"tools": len(bench.catalog), "index_seconds": index.build_seconds, **index.field_seconds}
        prepared = []
        for q, Q in zip(bench.queries, ivecs):
            texts = router.intents(q.text)
            per_field = [index.field_bm25_scores(t, FIELDS) for t in texts] if "bm25" in fields else None
            prepared.append((texts, Q, [index.bm25_scores(t) for t in texts], q.needed, per_field))
        fitted.append((name, index, router.policy, prepared, [c.key for c in bench.catalog.cards]))
    return fitted, used, build


def field_search(cfg: ToolsConfig, fitted, start: tuple[float, float], signals: tuple[str, ...], log=print) -> dict:
    """Coordinate search, from the grid's best (w_bm25, rrf_k) with no field weighted: one stage per signal
    in `signals`, each over w_bm25, rrf_k and every field weight so far, until a pass changes nothing."""
    memo: dict[tuple, list[float]] = {}
    dims = ["w_bm25", "rrf_k", *(f"{sig}.{f}" for sig in FIELD_SIGNALS for f in FIELDS)]

    def per_bench(point: dict) -> list[float]:
        key = tuple(point.get(d, 0.0) for d in dims)  # a field not searched yet weighs 0
        if key not in memo:
            upd = {"w_bm25": point["w_bm25"], "w_dense": 1.0, "rrf_k": point["rrf_k"]}
            for sig in FIELD_SIGNALS:
                upd[f"w_{sig}_fields"] = FieldWeights(**{f: point.get(f"{sig}.{f}", 0.0) for f in FIELDS})
            r = cfg.retrieval.model_copy(update=upd)
            memo[key] = [_score(ToolRouter(index, policy, r, cfg.groups), prepared, keys, name == "bfcl")
                         for name, index, policy, prepared, keys in fitted]
        return memo[key]

    def evaluate(point: dict) -> float:
        return float(np.mean(per_bench(point)))

    names = [f[0] for f in fitted]

    def step(label: str) -> dict:
        return {"step": label, **point, "score": evaluate(point), "per_benchmark": dict(zip(names, per_bench(point)))}

    point = {"w_bm25": start[0], "rrf_k": start[1]}
    coords = {"w_bm25": (0.0, *W_BM25), "rrf_k": RRF_K}
    steps = [step("whole-text BM25 + dense (grid)")]
    for sig in signals:
        for f in FIELDS:
            coords[f"{sig}.{f}"] = FIELD_W
            point[f"{sig}.{f}"] = 0.0
        for _ in range(MAX_PASSES):
            changed = False
            for c, values in coords.items():
                here = evaluate(point)
                for v in values:
                    trial = {**point, c: v}
                    if evaluate(trial) > here + 1e-9:  # strictly better: ties keep the current value
                        point, here, changed = trial, evaluate(trial), True
            if not changed:
                break
        steps.append(step(f"+ {sig} per field"))
        log(f"per-field {sig}: {evaluate(point):.4f} ({len(memo)} points scored)")
    for prev, now in zip(steps, steps[1:]):
        now["gain"] = now["score"] - prev["score"]
    return {"w_bm25": point["w_bm25"], "w_dense": 1.0, "rrf_k": point["rrf_k"],
            **{f"w_{sig}_fields": {f: point.get(f"{sig}.{f}", 0.0) for f in FIELDS} for sig in FIELD_SIGNALS},
            "score": evaluate(point), "steps": steps, "signals": list(signals),
            "points": [{**dict(zip(dims, k)), "score": float(np.mean(v)), "per_benchmark": dict(zip(names, v))}
                       for k, v in memo.items()]}


def write_fusion(result: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    return path
