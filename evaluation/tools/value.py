"""What the tool router buys end to end, on the recorded thousand-tools runs (`switchcraft tools value`).

The recordings (`bfcl_v4_outputs/thousand_tools/*_results.txt`) give, per model
and BFCL category (`multiple`, `parallel`, `parallel_multiple`; 200 questions
each), the accuracy when N random distractors from `all_unique_functions.json`
(2,405 real BFCL schemas) are offered beside the question's own functions.

With the tool router in front, the model is offered only the exposed set. Per
question i the router is run over a catalog of the whole 2,405-function pool
plus the question's own functions (the hardest case: every distractor at once)
and gives hit_i (every needed tool exposed, exact schema) and the number of
tools offered (exposed + `request_group`). The estimate is

    accuracy with router = mean_i hit_i × acc(N_eff_i),   N_eff_i = offered_i − own_i (≥ 0),

acc(·) the recorded curve of that model and category, linear between the
recorded pool sizes. Its assumption: accuracy with K tools offered depends on
K, not on which K (the router offers the most similar tools, the recordings
random ones). `check_per_query` tests it where per-query recordings exist
(predictions per test_id; see docs/tool_routing.md).

Intervals: Wilson 95% for a recorded accuracy (n questions); for the estimate
and the difference, a bootstrap over questions with each recorded point drawn
from its Beta posterior. Prompt tokens are the question plus the offered tool
schemas (OpenAI JSON), counted with the index's WordPiece tokenizer; without
the router, each question's own docs plus N distractors drawn as the recordings
drew them (uniformly, names other than its own).

    switchcraft tools value --run-dir runs/tools_value
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.errors import DataError

RESULT_FILES = ("category_scaling_results.txt", "all_models_category_results.txt")
CATEGORIES = ("multiple", "parallel", "parallel_multiple")
_MODEL = re.compile(r"^Model:\s*(\S.*?)\s*$")
_CATEGORY = re.compile(r"^\s*Category:\s*(\S+)\s*$")
_POOL = re.compile(r"^\s*Pool\s+(\d+):\s*([0-9.]+)%\s*$")


# -- the recordings ---------------------------------------------------------------


def parse_results(path: str | Path) -> dict[tuple[str, str], dict[int, float]]:
    """(model, category) → {distractors: accuracy 0–1} from one results file; errors name the line."""
    path = Path(path)
    out: dict[tuple[str, str], dict[int, float]] = {}
    model = category = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if m := _MODEL.match(line):
            model, category = m.group(1), None
        elif m := _CATEGORY.match(line):
            if model is None:
                raise DataError("Category before any Model line", path=path, line=n)
            category = m.group(1)
            out.setdefault((model, category), {})
        elif m := _POOL.match(line):
            if category is None:
                raise DataError("Pool line outside a Category", path=path, line=n)
            acc = float(m.group(2)) / 100
            if not 0 <= acc <= 1:
                raise DataError(f"accuracy {m.group(2)}% outside 0–100", path=path, line=n)
            out[(model, category)][int(m.group(1))] = acc
        elif re.match(r"^\s*(Pool\s|Category:|Model:)", line):
            raise DataError(f"unreadable line {line.strip()!r}", path=path, line=n,
                            hint="expected 'Model: X', 'Category: c' or 'Pool N: 12.34%'")
    return out


def read_curves(folder: str | Path, files: tuple[str, ...] = RESULT_FILES) -> dict[tuple[str, str], dict[int, float]]:
    """Every recorded curve of the thousand-tools folder; a curve recorded twice must agree."""
    curves: dict[tuple[str, str], dict[int, float]] = {}
    for name in files:
        path = Path(folder) / name
        if not path.exists():
            raise DataError("recorded results not found", path=path)
        for key, curve in parse_results(path).items():
            if key in curves and curves[key] != curve:
                raise DataError(f"{key[0]} / {key[1]} differs from an earlier file's curve", path=path)
            curves[key] = curve
    return curves


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


# -- routing the recorded questions -----------------------------------------------


@dataclass
class Routed:
    """One recorded question routed over the pool + its own functions."""
    id: str
    category: str
    own: int  # functions the question came with (offered at pool 0)
    offered: int  # tools the model sees with the router: exposed + request_group
    hit: bool  # every needed tool exposed, the exact schema
    hit_name: bool  # … by function name (another schema of the same name counts)
    hit_after: bool  # after the simulated agent asks request_group for each missing tool's group
    tokens_router: int  # question + exposed schemas + request_group
    tokens_own: int  # question + own docs (the prompt at pool 0)
    offered_after: int = 0  # tools offered once the simulated request_group calls added theirs


def value_benchmark(data_root: str | Path, categories=CATEGORIES, bfcl_eval_data=None):
    """(the BFCL benchmark, a benchmark of the recorded categories' questions over pool + their own docs)."""
    from evaluation.tools.data import Benchmark, read_bfcl
    from serving.tools.catalog import Catalog

    full = read_bfcl(data_root, bfcl_eval_data)
    queries = [q for q in full.queries if q.split in {f"bfcl_v4:{c}" for c in categories}]
    found = {q.split.split(":", 1)[1] for q in queries}
    if missing := [c for c in categories if c not in found]:
        raise DataError(f"no BFCL v4 questions of categories {missing}", path=data_root)
    keep = set(full.pool_keys) | {k for q in queries for k in q.offered}
    cards = [c for c in full.catalog.cards if c.key in keep]
    return full, Benchmark("bfcl_value", Catalog(cards, sources=full.catalog.sources), queries, pool_keys=full.pool_keys)


def sub_index(full_index, catalog):
    """The index of a sub-catalog, reusing the full index's tool and group vectors (same texts, same vectors)."""
    from serving.tools.index import ToolIndex

    pos = full_index.catalog.position
    rows = [pos[c.key] for c in catalog.cards]
    gpos = {g: i for i, g in enumerate(full_index.group_order)}
    groups = [gpos[g] for g in catalog.group_names()]
    return ToolIndex(catalog, full_index.encoder, full_index.tool_vecs[rows], full_index.group_vecs[groups],
                     full_index.schema_tokens[rows], query_encoder=full_index.query_encoder,
                     query_model=full_index.query_model)


def route_recorded(bench, router, qvecs: list[np.ndarray]) -> list[Routed]:
    """Route each question as a caller who may see every tool; simulate `request_group` for missing tools."""
    from evaluation.tools.evaluate import EVAL_CALLER, base_name

    cards = router.catalog
    tok = router.index.schema_tokens
    count = router.index.encoder.count_tokens
    out = []
    for q, v in zip(bench.queries, qvecs):
        d = router.route(q.text, EVAL_CALLER, qvecs=v)
        shown = set(d.tool_keys)
        names = {base_name(k) for k in shown}
        q_tokens = count(q.text)
        hit = set(q.needed) <= shown
        hit_name = {base_name(k) for k in q.needed} <= names
        for g in dict.fromkeys(cards.cards[cards.position[k]].group_name for k in q.needed if k not in shown):
            router.expand(d, g, EVAL_CALLER)
        out.append(Routed(
            id=q.id, category=q.split.split(":", 1)[1], own=len(q.offered), offered=len(shown) + 1, hit=hit,
            hit_name=hit_name, hit_after=set(q.needed) <= set(d.tool_keys), offered_after=len(d.tool_keys) + 1,
            tokens_router=q_tokens + d.schema_tokens["exposed"],
            tokens_own=q_tokens + int(sum(tok[cards.position[k]] for k in q.offered))))
    return out


def distractor_tokens(routed: list[Routed], bench, index, n: int, seed: int = 0) -> np.ndarray:
    """Per question: question + own docs + n distractors drawn uniformly from the pool (other names), in tokens."""
    from evaluation.tools.evaluate import base_name

    pos = index.catalog.position
    own_names = {q.id: {base_name(k) for k in q.offered} for q in bench.queries}
    pool = [k for k in bench.pool_keys if k in pos]
    rng = random.Random(seed)
    out = []
    for r in routed:
        cand = [k for k in pool if base_name(k) not in own_names[r.id]]
        pick = rng.sample(cand, min(n, len(cand)))
        out.append(r.tokens_own + int(sum(index.schema_tokens[pos[k]] for k in pick)))
    return np.array(out, dtype=np.float64)


# -- the estimate -----------------------------------------------------------------


def estimate(routed: list[Routed], curve: dict[int, float], n_recorded: int, resamples: int = 2000,
             seed: int = 0, field: str = "hit", size: str = "offered") -> dict:
    """Accuracy with the router in front: mean_i hit_i × acc(N_eff_i), with a bootstrap 95% interval.

    Each resample draws the questions with replacement and every recorded point
    from Beta(k + 1, n − k + 1) (k = its correct answers of n_recorded).
    """
    hits = np.array([getattr(r, field) for r in routed], dtype=np.float64)
    neff = np.array([max(0, getattr(r, size) - r.own) for r in routed], dtype=np.float64)
    xs = sorted(curve)
    ys = np.array([curve[x] for x in xs])
    point = float(np.mean(hits * np.interp(neff, xs, ys)))
    rng = np.random.default_rng(seed)
    k = np.round(ys * n_recorded)
    draws = np.empty(resamples)
    curves = np.empty((resamples, len(xs)))
    for b in range(resamples):
        idx = rng.integers(0, len(hits), len(hits))
        y = rng.beta(k + 1, n_recorded - k + 1)
        curves[b] = y
        draws[b] = np.mean(hits[idx] * np.interp(neff[idx], xs, y))
    return {"estimate": point, "interval": [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))],
            "draws": draws, "curve_draws": curves, "xs": xs}


def value_rows(routed: list[Routed], curves: dict[tuple[str, str], dict[int, float]], n_by_category: dict[str, int],
               tokens_at: dict[tuple[str, int], np.ndarray], prices: dict[str, float], pools=(128, 512),
               resamples: int = 2000) -> list[dict]:
    """One row per (model, category, recorded pool size): without and with the router, accuracy and tokens."""
    rows = []
    for (model, category), curve in sorted(curves.items()):
        sel = [r for r in routed if r.category == category]
        if not sel:
            continue
        n = n_by_category[category]
        est = estimate(sel, curve, n, resamples)
        # The agent's second turn: request_group for each missing tool's group, then the larger set offered.
        after = estimate(sel, curve, n, resamples, field="hit_after", size="offered_after")
        rt = np.array([r.tokens_router for r in sel], dtype=np.float64)
        xs = est["xs"]
        for pool in pools:
            if pool not in curve:
                continue
            acc = curve[pool]
            base_draws = est["curve_draws"][:, xs.index(pool)]
            diff = est["draws"] - base_draws
            tk = tokens_at[(category, pool)]
            price = prices.get(model)
            rows.append({
                "model": model, "category": category, "distractors": pool, "n": n,
                "acc_without": acc, "acc_without_ci": list(wilson(round(acc * n), n)),
                "acc_router": est["estimate"], "acc_router_ci": est["interval"],
                "gain": est["estimate"] - acc,
                "gain_ci": [float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5))],
                "tokens_without": float(tk.mean()), "tokens_without_ci": list(mean_ci(tk)),
                "tokens_router": float(rt.mean()), "tokens_router_ci": list(mean_ci(rt)),
                "usd_per_1k_without": None if price is None else float(tk.mean()) * price / 1e3,
                "usd_per_1k_router": None if price is None else float(rt.mean()) * price / 1e3,
                "price_per_mtok": price,
                "acc_router_after": after["estimate"], "acc_router_after_ci": after["interval"],
                "recall_all_needed": float(np.mean([r.hit for r in sel])),
                "offered_router": float(np.mean([r.offered for r in sel])),
            })
    return rows


def mean_ci(x: np.ndarray, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95% interval of a mean."""
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (resamples, len(x)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def read_prices(path: str | Path | None, overrides: list[str] = ()) -> dict[str, float]:
    """Model → USD per million input tokens: a prices JSON (`models.<name>.input_per_mtok`), then MODEL=USD overrides."""
    prices: dict[str, float] = {}
    if path:
        doc = json.loads(Path(path).read_text())
        for name, p in (doc.get("models") or {}).items():
            if isinstance(p, dict) and "input_per_mtok" in p:
                prices[name] = float(p["input_per_mtok"])
    for item in overrides:
        name, sep, usd = item.partition("=")
        try:
            prices[name.strip()] = float(usd)
        except ValueError:
            raise DataError(f"--price {item!r}: expected MODEL=USD_PER_MILLION_INPUT_TOKENS") from None
        if not sep:
            raise DataError(f"--price {item!r}: expected MODEL=USD_PER_MILLION_INPUT_TOKENS")
    return prices


# -- per-query recordings (predictions per test_id) ---------------------------------


def read_predictions(path: str | Path) -> dict[str, str | None]:
    """test_id → the function name a recorded run called first (None: no call); JSONL, errors name the line."""
    out: dict[str, str | None] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pred = row.get("prediction")
            if isinstance(pred, list):
                pred = pred[0] if pred else None
            out[str(row["test_id"])] = pred.get("name") if isinstance(pred, dict) else None
        except (ValueError, KeyError, AttributeError) as e:
            raise DataError(f"unreadable prediction ({e})", path=path, line=n,
                            hint='expected {"test_id": ..., "prediction": {"name": ...}}') from None
    return out


def check_per_query(routed: list[Routed], needed_name: dict[str, str], router_names: dict[str, set[str]],
                    predictions: dict[int, dict[str, str | None]], resamples: int = 2000, seed: int = 0) -> dict:
    """The estimate against per-query recordings of one model (name-correct calls, pools → test_id → name).

    - `product`: mean_i hit_i × acc(N_eff_i) with acc the mean of the per-query curve (what `estimate` does);
    - `per_query`: mean_i hit_i × c_i(N_eff_i), c_i the question's own 0/1 curve (linear between pools):
      the two differ by how the router's misses and the model's failures line up on the same questions;
    - `confusions[N]`: of the questions right at pool 0 and wrong at pool N, how many called a tool the
      router exposes for that question (a similar tool it would still offer) — the "which K" side.
    """
    pools = sorted(predictions)
    ids = [r.id for r in routed if all(r.id in predictions[p] for p in pools)]
    by_id = {r.id: r for r in routed}
    c = np.array([[float(predictions[p][i] == needed_name[i]) for p in pools] for i in ids])
    hits = np.array([by_id[i].hit for i in ids], dtype=np.float64)
    neff = np.array([max(0, by_id[i].offered - by_id[i].own) for i in ids], dtype=np.float64)
    ci = np.array([np.interp(neff[j], pools, c[j]) for j in range(len(ids))])
    acc = c.mean(axis=0)
    product = hits * np.interp(neff, pools, acc)
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(resamples):
        idx = rng.integers(0, len(ids), len(ids))
        a = c[idx].mean(axis=0)
        diffs.append(np.mean(hits[idx] * ci[idx]) - np.mean(hits[idx] * np.interp(neff[idx], pools, a)))
    confusions = {}
    for j, p in enumerate(pools[1:], 1):
        lost = [i for k, i in enumerate(ids) if c[k, 0] == 1 and c[k, j] == 0]
        similar = sum(1 for i in lost if predictions[p][i] in router_names[i])
        confusions[p] = {"lost": len(lost), "called_a_tool_the_router_exposes": similar,
                         "no_call": sum(1 for i in lost if predictions[p][i] is None)}
    return {"n": len(ids), "pools": pools, "name_accuracy": dict(zip(pools, acc.tolist())),
            "recall_all_needed": float(hits.mean()), "product": float(product.mean()),
            "per_query": float(np.mean(hits * ci)),
            "per_query_minus_product_ci": [float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))],
            "confusions": confusions}


# -- the whole measurement ------------------------------------------------------------


def run(data_root: str | Path = "../shared/data", run_dir: str | Path = "runs/tools_value", cfg=None,
        prices: dict[str, float] | None = None, pools=(128, 512), predictions_dir: str | Path | None = None,
        limit: int | None = None, log=print) -> dict:
    """Route the recorded categories' questions, estimate every recorded model × category; write value.json/.md."""
    from evaluation.tools.evaluate import EVAL_CALLER, base_name, intent_vectors  # noqa: F401
    from evaluation.tools.report import value_section
    from serving.tools.config import ToolsConfig
    from serving.tools.index import ToolIndex, checked_model_dir
    from serving.tools.policy import AccessPolicy
    from serving.tools.router import ToolRouter

    cfg = cfg or ToolsConfig()
    run_dir = Path(run_dir)
    curves = read_curves(Path(data_root) / "bfcl_v4_outputs/thousand_tools")
    cats = tuple(sorted({c for _, c in curves}))
    extra = ("simple_python",) if predictions_dir else ()
    full, bench = value_benchmark(data_root, cats + extra)
    preds = read_prediction_files(predictions_dir) if predictions_dir else {}
    with_preds = {i for by_pool in preds.values() for p in by_pool.values() for i in p}
    by: dict[str, list] = {}
    for q in bench.queries:
        if q.split != "bfcl_v4:simple_python" or _bare(q.id) in with_preds:  # simple_python: only for the per-query check
            by.setdefault(q.split, []).append(q)
    rng = random.Random(0)
    bench.queries = [q for s, qs in by.items() for q in
                     (rng.sample(qs, limit) if limit and len(qs) > limit and s != "bfcl_v4:simple_python" else qs)]
    index = ToolIndex.build(full.catalog, Path(cfg.index_dir), model_dir=checked_model_dir(cfg.encoder, "encoder"),
                            query_model_dir=checked_model_dir(cfg.query_encoder, "query_encoder"),
                            query_precision=cfg.retrieval.query_precision)
    sub = sub_index(index, bench.catalog)
    router = ToolRouter(sub, AccessPolicy(default_max_risk="irreversible"), cfg.retrieval, cfg.groups)
    log(f"value catalog: {len(bench.catalog)} tools ({len(bench.pool_keys)} pool cards + the questions' own docs), "
        f"{len(bench.queries)} questions; encoder {index.encoder.name}")
    routed = route_recorded(bench, router, intent_vectors(bench, router, run_dir / "cache"))
    recorded = [r for r in routed if r.category in cats]
    n_by_cat = {c: sum(1 for q in full.queries if q.split == f"bfcl_v4:{c}") for c in cats}
    tokens_at = {(c, n): distractor_tokens([r for r in recorded if r.category == c],
                                           _only(bench, c), sub, n) for c in cats for n in pools}
    rows = value_rows(recorded, curves, n_by_cat, tokens_at, prices or {}, pools)
    out = {"encoder": index.encoder.name, "config": {"retrieval": cfg.retrieval.model_dump(), "groups": cfg.groups.model_dump()},
           "catalog_tools": len(bench.catalog), "pool_tools": len(bench.pool_keys), "limit": limit,
           "routed": {c: _routed_summary([r for r in recorded if r.category == c]) for c in cats},
           "curve_checks": curve_checks(curves, n_by_cat), "rows": rows}
    if predictions_dir:
        out["per_query"] = per_query_checks(preds, [r for r in routed if r.category == "simple_python"],
                                            bench, router, log)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "value.json").write_text(json.dumps(out, indent=2, default=float))
    (run_dir / "value.md").write_text(value_section(out))
    return out


def _only(bench, category):
    from evaluation.tools.data import Benchmark

    return Benchmark(bench.name, bench.catalog, [q for q in bench.queries if q.split == f"bfcl_v4:{category}"],
                     pool_keys=bench.pool_keys)


def _routed_summary(rs: list[Routed]) -> dict:
    n = len(rs)
    out = {"n": n, "offered_mean": float(np.mean([r.offered for r in rs])),
           "own_mean": float(np.mean([r.own for r in rs])),
           "tokens_router_mean": float(np.mean([r.tokens_router for r in rs])),
           "tokens_own_mean": float(np.mean([r.tokens_own for r in rs]))}
    for f in ("hit", "hit_name", "hit_after"):
        k = sum(getattr(r, f) for r in rs)
        out[f] = k / n
        out[f + "_ci"] = list(wilson(k, n))
    return out


def curve_checks(curves: dict[tuple[str, str], dict[int, float]], n_by_cat: dict[str, int]) -> dict:
    """What the recorded curves alone can say: each point a whole number of n answers; rises beyond noise."""
    out = {"points": 0, "not_whole": [], "rises_outside_noise": [], "rises": 0}
    for (model, cat), curve in curves.items():
        n = n_by_cat.get(cat)
        xs = sorted(curve)
        for x in xs:
            out["points"] += 1
            if n and abs(curve[x] * n - round(curve[x] * n)) > 1e-6:
                out["not_whole"].append(f"{model}/{cat}/{x}")
        for a, b in zip(xs, xs[1:]):
            if curve[b] > curve[a]:
                out["rises"] += 1
                lo, hi = wilson(round(curve[a] * n), n) if n else (0, 1)
                if curve[b] > hi:
                    out["rises_outside_noise"].append(f"{model}/{cat}: {a}→{b}")
    return out


def read_prediction_files(folder: str | Path) -> dict[str, dict[int, dict[str, str | None]]]:
    """model tag → pool size → test_id → called name, from predictions_<tag>_pool<N>.jsonl files."""
    files = sorted(Path(folder).glob("predictions_*_pool*.jsonl"))
    if not files:
        raise DataError("no predictions_<model>_pool<N>.jsonl files", path=folder)
    by_tag: dict[str, dict[int, dict]] = {}
    for f in files:
        m = re.fullmatch(r"predictions_(.+)_pool(\d+)\.jsonl", f.name)
        if m:
            by_tag.setdefault(m.group(1), {})[int(m.group(2))] = read_predictions(f)
    return by_tag


def per_query_checks(by_tag: dict, routed: list[Routed], bench, router, log=print) -> dict:
    """`check_per_query` for each model tag of `read_prediction_files` that has a pool-0 file."""
    from evaluation.tools.evaluate import EVAL_CALLER

    from dataclasses import replace

    qs = {q.id: q for q in bench.queries}
    cards = router.catalog
    needed_name, exposed = {}, {}
    for r in routed:
        q = qs[r.id]
        needed_name[_bare(r.id)] = cards.cards[cards.position[q.needed[0]]].exposed_name.split("~")[0]
        exposed[_bare(r.id)] = {n.split("~")[0] for n in router.route(q.text, EVAL_CALLER).exposed_names}
    bare = [replace(r, id=_bare(r.id)) for r in routed]  # recorded test_ids carry no source prefix
    out = {}
    for tag, preds in by_tag.items():
        if 0 not in preds:
            log(f"per-query check: {tag} has no pool 0 file; skipped")
            continue
        out[tag] = check_per_query(bare, needed_name, exposed, preds)
    return out


def _bare(qid: str) -> str:
    """`bfcl_v4:simple_python_3` → `simple_python_3` (the recordings' test_id)."""
    return qid.split(":", 1)[-1]
