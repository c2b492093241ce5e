"""The retrieval index of a catalog: BM25 (bm25s) + MiniLM embeddings, fused by reciprocal rank.

Tool and group embeddings are computed once per catalog version and cached
under `<index_dir>/<catalog version>/` (a run directory, never the package),
so routing a request embeds only the query. BM25 is rebuilt on load: it takes
well under a second for thousands of cards.

Per-field retrieval (`retrieval.w_bm25_fields` / `w_dense_fields`, off by
default) ranks the cards' name, description and parameters (`search_fields`)
on their own as well: a BM25 index per field, built on first use
(`field_bm25_scores`), and an embedding per card per field, cached beside
the whole-text ones (`field_vecs`, computed on first use); each ranking enters the RRF with its weight.

    from serving.tools.index import ToolIndex
    index = ToolIndex.build(catalog, "runs/tools/index")     # or ToolIndex.load(...)
    bm25, dense = index.scores("refund the last charge")
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import numpy as np

from serving.tools.cards import FIELDS, search_fields, search_text, split_identifier
from serving.tools.catalog import Catalog
from serving.tools.encoder import ENCODER_ID, MiniLMEncoder

# Bump when search_text or the tokenisation changes: cached embeddings then no longer match.
TEXT_RECIPE = "v1"
# The same for `search_fields` (the per-field embeddings' file names carry it).
FIELD_RECIPE = "f1"
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by can could do does for from get give has have i in is it me my of on or "
    "please show tell that the this to using was what when where which will with would you your".split()
)


def bm25_tokens(text: str, stem) -> list[str]:
    words = _WORD.findall(split_identifier(text))
    return stem.stemWords([w for w in words if w not in _STOP])


class ToolIndex:
    def __init__(self, catalog: Catalog, encoder: MiniLMEncoder, tool_vecs: np.ndarray, group_vecs: np.ndarray,
                 schema_tokens: np.ndarray, index_dir: Path | None = None, build_seconds: float = 0.0,
                 query_encoder=None, query_model=None, field_vecs: dict | None = None):
        import Stemmer

        self.catalog, self.encoder = catalog, encoder
        # Tools are embedded in fp32 once; queries may use a faster (int8) encoder.
        self.query_encoder = query_encoder or encoder
        # The query model in fp32 (the trained encoder, or the query encoder distilled from it): what an
        # offline evaluation embeds queries with, in batches.
        self.query_model = query_model or encoder
        self.tool_vecs, self.group_vecs = tool_vecs, group_vecs
        self.group_order = catalog.group_names()
        self.schema_tokens = schema_tokens  # per card: tokens of its OpenAI definition
        self.index_dir, self.build_seconds = index_dir, build_seconds
        self._stem = Stemmer.Stemmer("english")
        self.bm25 = self._bm25_of([search_text(c) for c in catalog.cards])
        self._vocab = self.bm25.vocab_dict
        self._fields: dict[str, tuple] = {}  # field → (BM25, vocab), built on first use
        # field → (vectors, card has text), computed on first use; `field_vecs` shares another index's
        # (the same cards, e.g. with other permissions) instead of embedding them again.
        self.field_cache: dict[str, tuple[np.ndarray, np.ndarray]] = field_vecs if field_vecs is not None else {}
        self._field_lock = threading.Lock()
        self.field_seconds: dict[str, float] = {}  # build time of each per-field index ("bm25:name", "dense:name")

    def _bm25_of(self, texts: list[str]):
        import bm25s

        bm25 = bm25s.BM25()
        bm25.index([bm25_tokens(t, self._stem) or ["<empty>"] for t in texts], show_progress=False)
        return bm25

    # -- building and caching -------------------------------------------------

    @classmethod
    def from_config(cls, catalog: Catalog, cfg) -> ToolIndex:
        """The index a `ToolsConfig` asks for: its encoder (trained or base), query encoder, precision, threads."""
        r = cfg.retrieval
        return cls.build(catalog, cfg.index_dir, query_precision=r.query_precision, query_threads=r.query_threads,
                         model_dir=checked_model_dir(cfg.encoder, "encoder"),
                         query_model_dir=checked_model_dir(cfg.query_encoder, "query_encoder"))

    @classmethod
    def build(cls, catalog: Catalog, index_dir: str | Path | None = None, encoder: MiniLMEncoder | None = None,
              batch_size: int = 32, query_precision: str = "fp32", query_threads: int = 1,
              model_dir: str | Path | None = None, query_model_dir: str | Path | None = None) -> ToolIndex:
        """Load the cached embeddings for this catalog version and encoder, or compute and cache them.

        `model_dir`: a trained encoder folder (default: the base MiniLM); `query_model_dir`: a
        shallower query encoder distilled from it. `query_precision="int8"` routes queries
        through the int8 ONNX encoder (needs index_dir).
        """
        query_encoder = query_model = None
        if encoder is None:
            from serving.tools.onnx_encoder import OnnxQueryEncoder, load_encoder

            enc_dir = Path(index_dir) / "encoder" if index_dir else None
            encoder = load_encoder(enc_dir, model_dir)
            if query_model_dir is not None:
                query_model = load_encoder(enc_dir, query_model_dir)
                query_encoder = load_encoder(enc_dir, query_model_dir, threads=query_threads,
                                             int8=query_precision == "int8")
            elif isinstance(encoder, OnnxQueryEncoder) and (query_precision == "int8" or query_threads != 1):
                query_encoder = OnnxQueryEncoder.create(encoder.base, enc_dir, threads=query_threads,
                                                        int8=query_precision == "int8")
        name = getattr(encoder, "name", ENCODER_ID)
        cached = cls._cache_dir(index_dir, catalog, name)
        if cached and (cached / "meta.json").exists():
            meta = json.loads((cached / "meta.json").read_text())
            if meta.get("encoder") == name and meta.get("recipe") == TEXT_RECIPE and meta.get("n_tools") == len(catalog):
                return cls(catalog, encoder, np.load(cached / "tool_vecs.npy"), np.load(cached / "group_vecs.npy"),
                           np.load(cached / "schema_tokens.npy"), cached, meta.get("build_seconds", 0.0), query_encoder,
                           query_model)
        t0 = time.perf_counter()
        tool_vecs = encoder.encode([search_text(c) for c in catalog.cards], batch_size=batch_size)
        groups = [catalog.groups[g] for g in catalog.group_names()]
        group_vecs = encoder.encode([f"{split_identifier(g.name)}: {g.description}" for g in groups], batch_size=batch_size)
        schema_tokens = np.array([encoder.count_tokens(json.dumps(c.to_openai())) for c in catalog.cards], dtype=np.int64)
        seconds = time.perf_counter() - t0
        if cached:
            cached.mkdir(parents=True, exist_ok=True)
            np.save(cached / "tool_vecs.npy", tool_vecs)
            np.save(cached / "group_vecs.npy", group_vecs)
            np.save(cached / "schema_tokens.npy", schema_tokens)
            meta = {"catalog_version": catalog.version, "encoder": name, "recipe": TEXT_RECIPE,
                    "n_tools": len(catalog), "n_groups": len(groups), "build_seconds": round(seconds, 2),
                    "sources": catalog.sources, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (cached / "meta.json").write_text(json.dumps(meta, indent=2))
            (cached / "cards.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n" for c in catalog.cards))
        return cls(catalog, encoder, tool_vecs, group_vecs, schema_tokens, cached, seconds, query_encoder, query_model)

    @staticmethod
    def _cache_dir(index_dir: str | Path | None, catalog: Catalog, encoder: str = ENCODER_ID) -> Path | None:
        """`<index_dir>/<catalog version>/` for the base encoder, `…/<version>@<encoder name>/` for a trained one."""
        if not index_dir:
            return None
        return Path(index_dir) / (catalog.version if encoder == ENCODER_ID else f"{catalog.version}@{encoder}")

    # -- scoring ----------------------------------------------------------------

    def embed_query(self, query: str) -> np.ndarray:
        return self.query_encoder.encode([query])[0]

    def bm25_scores(self, query: str) -> np.ndarray:
        return self._scores_of(self.bm25, self._vocab, bm25_tokens(query, self._stem))

    def _scores_of(self, bm25, vocab, words: list[str]) -> np.ndarray:
        """One BM25 index's scores for tokenised words (words it never saw dropped; none left: all 0)."""
        toks = [t for t in words if t in vocab]
        if not toks:
            return np.zeros(len(self.catalog), dtype=np.float32)
        return np.asarray(bm25.get_scores(toks), dtype=np.float32)

    def _once(self, cache: dict, field: str, build):
        """`cache[field]`, built by `build()` under the lock the first time (routing threads may race)."""
        if field not in FIELDS:
            raise ValueError(f"unknown card field {field!r}; fields: {', '.join(FIELDS)}")
        entry = cache.get(field)
        if entry is None:
            with self._field_lock:
                entry = cache.get(field)
                if entry is None:
                    entry = cache[field] = build()
        return entry

    def field_bm25(self, field: str):
        """(BM25 over one field of every card, its vocabulary): built once, on first use."""
        def build():
            t0 = time.perf_counter()
            bm25 = self._bm25_of([search_fields(c)[field] for c in self.catalog.cards])
            self.field_seconds[f"bm25:{field}"] = round(time.perf_counter() - t0, 3)
            return bm25, bm25.vocab_dict

        return self._once(self._fields, field, build)

    def field_bm25_scores(self, query: str, fields: tuple[str, ...] | list[str]) -> dict[str, np.ndarray]:
        """BM25 scores of `query` against each of `fields` (the query is tokenised once)."""
        words = bm25_tokens(query, self._stem)
        return {field: self._scores_of(*self.field_bm25(field), words) for field in fields}

    def field_vecs(self, field: str) -> tuple[np.ndarray, np.ndarray]:
        """(embedding of one field of every card, which cards have text in it): computed once with the
        tool encoder and cached beside the whole-text embeddings (`field_vecs_<field>_<recipe>.npy`)."""
        def build():
            texts = [search_fields(c)[field] for c in self.catalog.cards]
            has = np.array([bool(t.strip()) for t in texts])
            path = self.index_dir / f"field_vecs_{field}_{FIELD_RECIPE}.npy" if self.index_dir else None
            if path is not None and path.exists():
                return np.load(path), has
            t0 = time.perf_counter()
            vecs = np.zeros((len(texts), self.tool_vecs.shape[1]), dtype=np.float32)
            if has.any():
                vecs[has] = self.encoder.encode([t for t, h in zip(texts, has) if h], batch_size=32)
            self.field_seconds[f"dense:{field}"] = round(time.perf_counter() - t0, 2)
            if path is not None:
                np.save(path, vecs)
            return vecs, has

        return self._once(self.field_cache, field, build)

    def scores(self, query: str, qvec: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(BM25 scores, cosine similarities), one per card."""
        qvec = self.embed_query(query) if qvec is None else qvec
        return self.bm25_scores(query), self.tool_vecs @ qvec


def checked_model_dir(path: str | None, field: str) -> Path | None:
    """A configured encoder folder, or an error that says how to make it."""
    if path is None:
        return None
    p = Path(path)
    if not (p / "model.safetensors").exists():
        raise FileNotFoundError(f"{field}: {p} holds no trained encoder (model.safetensors); run `switchcraft tools "
                                f"train` to make it, or set {field}: null for the base all-MiniLM-L6-v2")
    return p


def rrf_fuse(bm25: np.ndarray, dense: np.ndarray, candidates: np.ndarray, k: float = 60.0,
             w_bm25: float = 1.0, w_dense: float = 1.0,
             extra: list[tuple[np.ndarray, float, np.ndarray | None]] = (), shortlist: int | None = None) -> np.ndarray:
    """Reciprocal rank fusion over the candidate cards (a bool mask); -inf elsewhere.

    A card BM25 does not match at all (score 0) gets no BM25 credit: its rank
    among the zeros would be arbitrary. `extra`: more rankings (per-field BM25
    and dense), each `(scores, weight, credited)`: cards outside `credited` (a
    bool mask; None: all) rank last and get no credit. Without extras (or with
    zero weights) the sum is exactly the two-signal one.

    `shortlist` N: each signal credits only its N best candidates (the same
    w / (k + rank) for them; 0 for the rest), found by a partial sort instead of
    ranking every candidate. Exact for every card inside each signal's top N.
    """
    if shortlist is not None and shortlist < int(candidates.sum()):
        return _rrf_shortlist(bm25, dense, candidates, k, w_bm25, w_dense, extra, shortlist)
    fused = np.full(len(dense), -np.inf, dtype=np.float64)
    idx = np.flatnonzero(candidates)
    if idx.size == 0:
        return fused
    total = np.zeros(idx.size, dtype=np.float64)
    signals = [(bm25, w_bm25, bm25 > 0), (dense, w_dense, None), *extra]
    for scores, w, credited in signals:
        if w == 0:
            continue
        s = scores[idx]
        if credited is not None:
            ok = credited[idx]
            s = np.where(ok, s, -np.inf)
        ranks = np.empty(idx.size, dtype=np.float64)
        ranks[np.argsort(-s, kind="stable")] = np.arange(1, idx.size + 1)
        contrib = w / (k + ranks)
        if credited is not None:
            contrib[~ok] = 0.0
        total += contrib
    fused[idx] = total
    return fused


def _rrf_shortlist(bm25, dense, candidates, k, w_bm25, w_dense, extra, n: int) -> np.ndarray:
    fused = np.full(len(dense), -np.inf, dtype=np.float64)
    idx = np.flatnonzero(candidates)
    total = np.zeros(idx.size, dtype=np.float64)
    for scores, w, credited in [(bm25, w_bm25, bm25 > 0), (dense, w_dense, None), *extra]:
        if w == 0:
            continue
        s = scores[idx]
        if credited is not None:
            s = np.where(credited[idx], s, -np.inf)
        top = np.argpartition(-s, n - 1)[:n]
        top = top[np.argsort(-s[top], kind="stable")]
        top = top[np.isfinite(s[top])]  # uncredited cards (BM25 score 0) get nothing, as in the full fusion
        total[top] += w / (k + np.arange(1, top.size + 1))
    fused[idx] = total
    return fused


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest finite scores, best first."""
    finite = np.flatnonzero(np.isfinite(scores))
    if finite.size <= k:
        return finite[np.argsort(-scores[finite], kind="stable")]
    part = finite[np.argpartition(-scores[finite], k - 1)[:k]]
    return part[np.argsort(-scores[part], kind="stable")]
