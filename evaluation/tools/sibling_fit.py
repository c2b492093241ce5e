"""Choose sibling fill per benchmark catalog (off, or its head share) without looking at the rows reported.

    switchcraft tools fit-fusion                          # the grid, then this → fusion.json["sibling_fill"]
    switchcraft tools fit-siblings --set encoder=null [--bench bfcl --bench stabletoolbench]
    switchcraft tools fit-siblings --paired               # held out: the configured setting vs off, paired

Sibling fill (`serving/tools/siblings.py`) helps where a namespace is one
service and costs recall where it is a topic, so it is set per catalog
(`catalog_retrieval:` in `configs/tools.yaml`). Each head share in `HEADS`
(None: off) is scored by the router's ranking (its first 10 places as the router
would expose 10) with the objective of the fusion fit: the mean over queries of
(Recall@5 + Comprehensiveness@10) / 2, BFCL by function name. A setting must beat
off strictly, or off stays.

- A catalog with training queries (BFCL live-train, MetaTool-train,
  Seal-Tools dev): chosen on all of them; held-out queries are never looked at.
- A catalog with none (StableToolBench: every query is held out): cross-fitted.
  Its queries fall in two fixed halves (SHA-256 of the id); each half's setting
  is chosen on the other half's queries (`folds`), so no query's figure comes
  from a setting chosen on it. When both halves choose the same setting, the
  held-out evaluation with that setting for the whole catalog is exactly the
  cross-fitted one (`agree`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evaluation.tools.data import in_fraction, read_benchmark
from evaluation.tools.evaluate import base_name, intent_vectors
from evaluation.tools.metrics import comprehensive_at, recall_at
from serving.tools.config import ToolsConfig
from serving.tools.index import ToolIndex, checked_model_dir
from serving.tools.policy import AccessPolicy
from serving.tools.router import ToolRouter
from serving.tools.siblings import namespace_ids, ranking

HEADS = (None, 0.3, 0.5, 0.7)
BENCHES = ("bfcl", "metatool", "seal_tools", "stabletoolbench")
CUT = 10  # the ranking's first CUT places are what the router would expose at K = CUT


def per_query_scores(router: ToolRouter, queries, ivecs, by_name: bool, heads=HEADS, patterns=("*",),
                     cut: int = CUT) -> dict:
    """head → per-query objective (R@5 + C@cut) / 2 of the router's ranking (its first `cut` places as the router
    would expose `cut`) with that sibling fill (None: off)."""
    keys = [c.key for c in router.catalog.cards]
    ns = namespace_ids(router.catalog.cards, list(patterns))
    everything = np.ones(len(keys), dtype=bool)
    out: dict = {h: [] for h in heads}
    for q, Q in zip(queries, ivecs):
        fused = router.fuse(router.intents(q.text), Q, everything)[0]
        needed = [base_name(t) for t in q.needed] if by_name else q.needed
        for h in heads:
            ranked = [keys[i] for i in ranking(fused, ns, h, max(cut, 5), cut)]
            if by_name:
                ranked = [base_name(k) for k in ranked]
            out[h].append((recall_at(ranked, needed, 5) + comprehensive_at(ranked, needed, cut)) / 2)
    return {h: np.array(v) for h, v in out.items()}


def choose(scores: dict, rows: np.ndarray | None = None) -> tuple[float | None, dict]:
    """The head share with the best mean objective over `rows` (all: None); off unless strictly better."""
    means = {h: float(v[rows].mean() if rows is not None else v.mean()) for h, v in scores.items()}
    best = None
    for h, m in means.items():
        if h is not None and m > means[best] + 1e-9:
            best = h
    return best, means


def halves(queries) -> np.ndarray:
    """Fold (0 or 1) of each query: a fixed half by SHA-256 of its id."""
    return np.array([0 if in_fraction(f"sibling-fold:{q.id}", 0.5) else 1 for q in queries])


def fit_sibling_fill(cfg: ToolsConfig, data_root: str | Path, run_dir: str | Path, model_dir: str | None = None,
                     query_model_dir: str | None = None, benches=BENCHES, log=print) -> dict:
    """Per benchmark catalog: the sibling fill chosen on its training queries (cross-fitted when it has none)."""
    run_dir = Path(run_dir)
    result = {}
    for name in benches:
        bench = read_benchmark(name, data_root)
        train = [q for q in bench.queries if q.domain == "train"]
        entry: dict = {}
        ns = namespace_ids(bench.catalog.cards, ["*"])
        if not (np.bincount(ns[ns >= 0]) > 1).any():
            result[name] = {"choice": None, "source": "no namespace holds two tools: sibling fill changes nothing"}
            log(f"sibling fill on {name}: no namespace holds two tools, off")
            continue
        queries = train or [q for q in bench.queries if q.domain != "train"]
        bench.queries = queries
        index = ToolIndex.build(bench.catalog, run_dir / "index", model_dir=checked_model_dir(model_dir, "encoder"),
                                query_model_dir=checked_model_dir(query_model_dir, "query_encoder"))
        retrieval = cfg.retrieval_for(name).model_copy(update={"sibling_fill": None})
        router = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"), retrieval, cfg.groups)
        scores = per_query_scores(router, queries, intent_vectors(bench, router, run_dir / "cache"), name == "bfcl")
        entry["queries"] = len(queries)
        entry["multi"] = sum(len(q.needed) > 1 for q in queries)
        if train:
            entry["source"] = "training queries"
            entry["choice"] = choose(scores)[0]
        else:
            fold = halves(queries)
            entry["source"] = "cross-fitted: each half's setting chosen on the other half (no training queries)"
            entry["folds"] = []
            for f in (0, 1):
                head, means = choose(scores, fold != f)
                entry["folds"].append({"fold": f, "queries": int((fold == f).sum()), "chosen_on": int((fold != f).sum()),
                                       "choice": head,
                                       "scores_on_other_half": {str(h): m for h, m in means.items()}})
            entry["agree"] = entry["folds"][0]["choice"] == entry["folds"][1]["choice"]
            entry["choice"] = entry["folds"][0]["choice"] if entry["agree"] else "per fold"
        entry["scores"] = {str(h): float(v.mean()) for h, v in scores.items()}
        result[name] = entry
        log(f"sibling fill on {name} ({entry['source']}, {len(queries)} queries): {entry['choice']}; "
            + ", ".join(f"{h}: {m:.4f}" for h, m in entry["scores"].items()))
    return result


def paired_heldout(cfg: ToolsConfig, data_root: str | Path, run_dir: str | Path, model_dir: str | None = None,
                   query_model_dir: str | None = None, benches=BENCHES, resamples: int = 2000, log=print) -> dict:
    """Held-out, paired: each catalog's configured sibling fill (`cfg.retrieval_for`) against off, on the same
    queries (all held out; multi-tool and single-tool apart): C@10 and R@5 of the router's ranking, requests won
    and lost, and a bootstrap 95% interval of the difference (queries resampled)."""
    run_dir = Path(run_dir)
    out = {}
    rng = np.random.default_rng(0)
    for name in benches:
        sf = cfg.retrieval_for(name).sibling_fill
        if sf is None:
            out[name] = {"sibling_fill": None}
            continue
        bench = read_benchmark(name, data_root, heldout=True)
        index = ToolIndex.build(bench.catalog, run_dir / "index", model_dir=checked_model_dir(model_dir, "encoder"),
                                query_model_dir=checked_model_dir(query_model_dir, "query_encoder"))
        router = ToolRouter(index, AccessPolicy(default_max_risk="irreversible"),
                            cfg.retrieval_for(name).model_copy(update={"sibling_fill": None}), cfg.groups)
        ivecs = intent_vectors(bench, router, run_dir / "cache")
        keys = [c.key for c in bench.catalog.cards]
        ns = namespace_ids(bench.catalog.cards, sf.namespaces)
        every = np.ones(len(keys), dtype=bool)
        norm = base_name if name == "bfcl" else (lambda x: x)
        per: dict = {}
        for q, Q in zip(bench.queries, ivecs):
            fused = router.fuse(router.intents(q.text), Q, every)[0]
            needed = [norm(t) for t in q.needed]
            sub = "multi" if len(q.needed) > 1 else "single"
            for label, head in (("off", None), ("on", sf.head)):
                ranked = [norm(keys[i]) for i in ranking(fused, ns, head, CUT, CUT)]
                per.setdefault((sub, label, "comp@10"), []).append(comprehensive_at(ranked, needed, CUT))
                per.setdefault((sub, label, "recall@5"), []).append(recall_at(ranked, needed, 5))
        entry = {"sibling_fill": sf.model_dump()}
        for sub in ("multi", "single"):
            for metric in ("comp@10", "recall@5"):
                if (sub, "off", metric) not in per:
                    continue
                off, on = np.array(per[(sub, "off", metric)]), np.array(per[(sub, "on", metric)])
                boot = [float((on[i] - off[i]).mean()) for i in rng.integers(0, len(on), (resamples, len(on)))]
                entry[f"{sub} {metric}"] = {"n": len(on), "off": float(off.mean()), "on": float(on.mean()),
                                            "diff": float((on - off).mean()),
                                            "diff_ci": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
                                            "won": int((on > off).sum()), "lost": int((on < off).sum())}
        out[name] = entry
        log(f"held out, {name}: " + "; ".join(f"{k} {v['off']:.3f} -> {v['on']:.3f} ({v['won']} won / {v['lost']} lost)"
                                              for k, v in entry.items() if isinstance(v, dict) and "off" in v))
    return out


def config_lines(result: dict) -> list[str]:
    """The `catalog_retrieval:` entries that the choices give (catalogs left off: off)."""
    return [f"  {name}: {{sibling_fill: {{head: {e['choice']}}}}}" for name, e in result.items()
            if isinstance(e.get("choice"), float)]
