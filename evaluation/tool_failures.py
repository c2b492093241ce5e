"""Why multi-tool requests miss Comprehensiveness@10: each missed tool of a failed request, classified.

    python -m evaluation.tool_failures --bench bfcl --bench stabletoolbench [--limit 300] [--set encoder=null]
    python -m evaluation.tool_failures --compare --set encoder=null     # C@10 of other top-10 rules, paired

A request fails C@10 when some needed tool is not in the router's top 10
(the multi-intent ranking of `switchcraft tools eval`, by function name on
BFCL). Each missed tool gets every class that applies (a tool can have several)
and one primary class, the first in `CLASSES` order:

- `not_split`: the request was split into fewer asks than it needs tools
  (one ask retrieves for several tools);
- `sibling_shown`: another tool of the same namespace (BFCL: a dotted name's prefix,
  `math.gcd` / `math.lcm`; StableToolBench: the same RapidAPI tool) is in the top 10, the
  needed one is not (tools without a namespace have no sibling);
- `no_word_overlap`: BM25 scores the tool 0 for the request and for every ask
  (no content word in common: "then do the same for Miami");
- `short_description`: the tool's description has at most 8 words;
- `near` (ranked 11–20) / `far` (below 20): none of the above.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

CLASSES = ("not_split", "sibling_shown", "no_word_overlap", "short_description", "near", "far")
SHORT_WORDS = 8


def classify_miss(rank: int, asks: int, needed: int, sibling_shown: bool, bm25_hit: bool, description: str) -> list[str]:
    """Every class of one missed tool (rank: 1-based rank in the router's ranking), primary first."""
    out = []
    if asks < needed:
        out.append("not_split")
    if sibling_shown:
        out.append("sibling_shown")
    if not bm25_hit:
        out.append("no_word_overlap")
    if len(description.split()) <= SHORT_WORDS:
        out.append("short_description")
    if not out:
        out.append("near" if rank <= 20 else "far")
    return out


def failures(bench, router, ivecs: list[np.ndarray], by_name: bool = False, k: int = 10) -> dict:
    """Classify the missed tools of every multi-tool request failing C@k; counts per class and per request."""
    from evaluation.tool_eval import base_name
    from serving.tools.index import top_k

    cards = bench.catalog.cards
    keys = [c.key for c in cards]
    norm = base_name if by_name else (lambda x: x)
    everything = np.ones(len(keys), dtype=bool)
    primary, any_class, per_request = Counter(), Counter(), Counter()
    n_multi = n_failed = 0
    examples: dict[str, list[str]] = {}
    for q, v in zip(bench.queries, ivecs):
        if len(q.needed) < 2:
            continue
        n_multi += 1
        texts = router.intents(q.text)
        fused = router.fuse(texts, v, everything)[0]
        order = top_k(fused, len(keys))
        rank = {norm(keys[i]): r for r, i in reversed(list(enumerate(order, 1)))}
        shown = [keys[i] for i in order[:k]]
        shown_names = {norm(s) for s in shown}
        missed = [t for t in q.needed if norm(t) not in shown_names]
        if not missed:
            continue
        n_failed += 1
        bm25 = [router.index.bm25_scores(t) for t in texts]
        shown_ns = {cards[router.catalog.position[s]].namespace for s in shown} - {""}
        req = set()
        for t in missed:
            card = cards[router.catalog.position[t]]
            cls = classify_miss(rank.get(norm(t), len(keys)), len(texts) - 1 if len(texts) > 1 else 1, len(q.needed),
                                card.namespace in shown_ns, any(b[router.catalog.position[t]] > 0 for b in bm25),
                                card.description or "")
            primary[cls[0]] += 1
            any_class.update(cls)
            req.add(cls[0])
            examples.setdefault(cls[0], []).append(f"{q.id}: {t}")
        per_request.update(req)
    return {"benchmark": bench.name, "multi_requests": n_multi, "failed": n_failed,
            "missed_primary": dict(primary), "missed_any": dict(any_class), "requests_with_primary": dict(per_request),
            "examples": {c: e[:5] for c, e in examples.items()}}


def sibling_fill(fused: np.ndarray, namespaces: list[str], head: int = 5, k: int = 10) -> list[int]:
    """Top k where the best `head` cards' namespace siblings (best first) take the next k − head places
    (the router's rule, `serving.tools.siblings.sibling_top`, with head share head / k)."""
    from serving.tools.siblings import sibling_top

    ids: dict[str, int] = {}
    ns = np.array([ids.setdefault(n, len(ids)) if n else -1 for n in namespaces], dtype=np.int64)
    return [int(i) for i in sibling_top(fused, ns, head / k, k)]


def round_robin(lists: list[list[int]], k: int = 10) -> list[int]:
    """Each ask's list in turn (the whole request's last), first places first, no repeats."""
    out: list[int] = []
    for pos in range(max(map(len, lists), default=0)):
        for lst in lists:
            if pos < len(lst) and lst[pos] not in out and len(out) < k:
                out.append(lst[pos])
    return out


def compare_merges(bench, router, ivecs: list[np.ndarray], by_name: bool = False, k: int = 10) -> dict:
    """C@k of the router's ranking (max over texts) against round-robin over the asks and sibling fill,
    on the same multi-tool requests; paired counts of requests each rule wins and loses."""
    from evaluation.tool_eval import base_name
    from evaluation.tool_metrics import comprehensive_at
    from serving.tools.index import rrf_fuse, top_k

    r = router.retrieval
    keys = [c.key for c in bench.catalog.cards]
    spaces = [c.namespace for c in bench.catalog.cards]
    every = np.ones(len(keys), dtype=bool)
    norm = base_name if by_name else (lambda x: x)
    hits: dict[str, list[float]] = {"max (router)": [], "round_robin": [], "sibling_fill": []}
    for q, v in zip(bench.queries, ivecs):
        texts = router.intents(q.text)
        fused = router.fuse(texts, v, every)[0]
        tops = {"max (router)": [int(i) for i in top_k(fused, k)], "sibling_fill": sibling_fill(fused, spaces, k // 2, k)}
        if len(texts) > 1:
            cos = router.index.tool_vecs @ v.T
            lists = [[int(i) for i in top_k(rrf_fuse(router.index.bm25_scores(t), cos[:, j], every, r.rrf_k, r.w_bm25,
                                                      r.w_dense, (), r.shortlist), k)] for j, t in enumerate(texts)]
            tops["round_robin"] = round_robin(lists[1:] + lists[:1], k)
        else:
            tops["round_robin"] = tops["max (router)"]
        needed = [norm(t) for t in q.needed]
        for m, top in tops.items():
            hits[m].append(comprehensive_at([norm(keys[i]) for i in top], needed, k))
    base = np.array(hits["max (router)"])
    out = {"benchmark": bench.name, "requests": len(base)}
    for m, h in hits.items():
        h = np.array(h)
        out[m] = {"c@k": float(h.mean()), "wins": int(((h == 1) & (base == 0)).sum()),
                  "losses": int(((h == 0) & (base == 1)).sum())}
    return out


def main() -> None:
    import argparse
    import json

    from threadpoolctl import threadpool_limits

    from evaluation.tool_data import read_benchmark
    from evaluation.tool_eval import intent_vectors
    from serving.tools.config import load_tools_config
    from serving.tools.index import ToolIndex, checked_model_dir
    from serving.tools.policy import AccessPolicy
    from serving.tools.router import ToolRouter

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", action="append", help="bfcl, stabletoolbench, seal_tools, metatool")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--run-dir", default="runs/tools")
    ap.add_argument("--config", default="configs/tools.yaml")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--limit", type=int, default=None, help="multi-tool requests per benchmark (a fixed sample)")
    ap.add_argument("--compare", action="store_true", help="C@10 of round-robin and sibling-fill top-10 rules, paired")
    a = ap.parse_args()
    cfg = load_tools_config(a.config, a.overrides)
    out = []
    with threadpool_limits(1):
        for name in a.bench or ["bfcl", "stabletoolbench"]:
            bench = read_benchmark(name, a.data_root, heldout=True)
            bench.queries = [q for q in bench.queries if len(q.needed) > 1]
            if a.limit and len(bench.queries) > a.limit:
                import random

                bench.queries = random.Random(0).sample(bench.queries, a.limit)
            index = ToolIndex.build(bench.catalog, Path(a.run_dir) / "index",
                                    model_dir=checked_model_dir(cfg.encoder, "encoder"))
            router = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"), cfg.retrieval, cfg.groups)
            ivecs = intent_vectors(bench, router, Path(a.run_dir) / "cache")
            run = compare_merges if a.compare else failures
            out.append(run(bench, router, ivecs, by_name=name == "bfcl"))
            print(json.dumps(out[-1], indent=2), flush=True)


if __name__ == "__main__":
    main()
