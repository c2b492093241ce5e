"""Learn the fusion weights (BM25 vs dense, RRF constant) on training queries only.

    switchcraft tools fit-fusion                          # the config's encoder → <train.out_dir>/fusion.json
    switchcraft tools fit-fusion --retriever base

The router fuses BM25 and dense rankings per text (whole request, each ask) by
weighted reciprocal rank fusion. Only the ratio w_bm25 / w_dense matters, so
w_dense stays 1 and a grid over w_bm25 and rrf_k is scored by the router's own
multi-intent fusion (`ToolRouter.fuse`) on the `train` queries of BFCL (live),
MetaTool and Seal-Tools (dev): mean of Recall@5 and Comprehensiveness@10 (BFCL
by function name), averaged over the three so that no catalog dominates.
Held-out queries are never looked at; their figures come from `tools eval`.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np

from evaluation.tool_data import read_benchmark
from evaluation.tool_eval import base_name, intent_vectors
from evaluation.tool_metrics import comprehensive_at, recall_at
from serving.tools.config import ToolsConfig
from serving.tools.index import ToolIndex, checked_model_dir, top_k
from serving.tools.policy import AccessPolicy
from serving.tools.router import ToolRouter

W_BM25 = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
RRF_K = (10.0, 30.0, 60.0, 120.0)
BENCHES = ("bfcl", "metatool", "seal_tools")


def _score(router: ToolRouter, prepared, keys, by_name: bool) -> float:
    everything = np.ones(len(keys), dtype=bool)
    vals = []
    for texts, Q, bm25, needed in prepared:
        ranked = [keys[i] for i in top_k(router.fuse(texts, Q, everything, bm25)[0], 10)]
        if by_name:
            ranked, needed = [base_name(k) for k in ranked], [base_name(k) for k in needed]
        vals.append((recall_at(ranked, needed, 5) + comprehensive_at(ranked, needed, 10)) / 2)
    return float(np.mean(vals))


def fit_fusion(cfg: ToolsConfig, data_root: str | Path, run_dir: str | Path, model_dir: str | None = None,
               query_model_dir: str | None = None, per_bench: int = 300, log=print) -> dict:
    """The grid's scores and the best (w_bm25, rrf_k), on at most `per_bench` training queries per benchmark."""
    run_dir = Path(run_dir)
    grid = list(itertools.product(W_BM25, RRF_K))
    scores = {g: [] for g in grid}
    used = {}
    for name in BENCHES:
        bench = read_benchmark(name, data_root)
        train = [q for q in bench.queries if q.domain == "train"]
        bench.queries = random.Random(0).sample(train, min(per_bench, len(train)))
        used[name] = len(bench.queries)
        index = ToolIndex.build(bench.catalog, run_dir / "index", model_dir=checked_model_dir(model_dir, "encoder"),
                                query_model_dir=checked_model_dir(query_model_dir, "query_encoder"))
        router = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"), cfg.retrieval, cfg.groups)
        ivecs = intent_vectors(bench, router, run_dir / "cache")
        prepared = []
        for q, Q in zip(bench.queries, ivecs):
            texts = router.intents(q.text)
            prepared.append((texts, Q, [index.bm25_scores(t) for t in texts], q.needed))
        keys = [c.key for c in bench.catalog.cards]
        for w, k in grid:
            r = cfg.retrieval.model_copy(update={"w_bm25": w, "w_dense": 1.0, "rrf_k": k})
            scores[(w, k)].append(_score(ToolRouter(index, router.policy, r, cfg.groups), prepared, keys, name == "bfcl"))
        log(f"fusion grid on {name}: {len(bench.queries)} training queries")
    mean = {g: float(np.mean(v)) for g, v in scores.items()}
    best = max(grid, key=lambda g: (mean[g], g == (1.0, 60.0)))  # ties keep the default
    current = (cfg.retrieval.w_bm25 / cfg.retrieval.w_dense, cfg.retrieval.rrf_k)
    result = {"w_bm25": best[0], "w_dense": 1.0, "rrf_k": best[1], "objective": "mean of (R@5 + C@10) / 2 over "
              + ", ".join(BENCHES) + " (train queries; BFCL by name)", "score": mean[best],
              "score_of_config": mean.get(current), "config": {"w_bm25": current[0], "rrf_k": current[1]},
              "queries": used, "encoder": model_dir, "query_encoder": query_model_dir,
              "grid": [{"w_bm25": w, "rrf_k": k, "score": mean[(w, k)], "per_benchmark": dict(zip(BENCHES, scores[(w, k)]))}
                       for w, k in grid]}
    return result


def write_fusion(result: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    return path
