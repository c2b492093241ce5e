"""The tool router: which few tools the model sees for one request.

Order matters and is the security argument: (1) the permission filter decides
what the caller may see; (2) groups are chosen among visible tools only, with a
confidence; (3) hybrid retrieval ranks visible tools in those groups to a
top-K, for the whole request and for each ask it makes (multi-intent); (4) low
confidence or an empty result widens (more groups, larger K), and if
confidence stays low a safe default set (read-only tools) is used;
(5) pinned tools that are visible and the `request_group` tool are added.
`expand` (the agent calling `request_group`) and `check_call` (a model output)
go through the same filter; a call naming a tool that was not exposed is
rejected, never mapped to a nearby name.

    from serving.tools.router import ToolRouter
    router = ToolRouter.from_config(load_tools_config("configs/tools.yaml"))
    decision = router.route("refund order 42", Caller(tenant="acme", roles=["support"]))
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from serving.tools.catalog import Catalog, request_group_tool
from serving.tools.config import GroupConfig, RetrievalConfig, ToolsConfig
from serving.tools.index import ToolIndex, rrf_fuse, top_k
from serving.tools.intents import split_intents
from serving.tools.policy import AccessPolicy, Caller, FilterResult
from serving.tools.siblings import namespace_ids, ranking, sibling_top


@dataclass
class Expansion:
    group: str
    accepted: bool
    added: list[str]
    reason: str = ""


@dataclass
class RoutingDecision:
    query: str
    tools: list[dict[str, Any]]  # OpenAI tool definitions bound to the request, request_group last
    tool_keys: list[str]  # catalog keys of the exposed tools (request_group excluded)
    groups: list[dict[str, Any]]  # [{name, confidence}] chosen groups
    confidence: float
    mode: str  # "retrieval" | "widened" | "safe_default"
    hidden: list[dict[str, str]]  # [{tool, reason}] what the filter hid
    catalog_version: str
    timings_ms: dict[str, float]
    expansions: list[Expansion] = field(default_factory=list)
    schema_tokens: dict[str, int] = field(default_factory=dict)  # visible catalog vs exposed
    caller: dict[str, Any] = field(default_factory=dict)
    intents: list[str] = field(default_factory=list)  # the asks retrieved separately (empty: one ask)

    @property
    def exposed_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CallCheck:
    """BFCL-style structured verdict on a model's tool call."""

    valid: bool
    error: str = ""
    error_type: str = ""  # "tool_error:not_exposed"


def unit_mean(rows) -> np.ndarray:
    """The normalised mean of unit vectors: the asks' vectors standing for the whole request."""
    m = np.mean(rows, axis=0)
    return m / max(float(np.linalg.norm(m)), 1e-12)


class ToolRouter:
    def __init__(self, index: ToolIndex, policy: AccessPolicy | None = None, retrieval: RetrievalConfig | None = None,
                 groups: GroupConfig | None = None, pinned: list[str] = ()):
        self.index, self.catalog = index, index.catalog
        self.policy = policy or AccessPolicy()
        self.retrieval = retrieval or RetrievalConfig()
        self.gcfg = groups or GroupConfig()
        unknown = [p for p in pinned if p not in self.catalog.position]
        if unknown:
            raise ValueError(f"pinned tools not in the catalog: {unknown}")
        self.pinned = [self.catalog.position[p] for p in pinned]
        self.group_names = index.group_order
        gpos = {g: i for i, g in enumerate(self.group_names)}
        self.group_of = np.array([gpos[c.group_name] for c in self.catalog.cards], dtype=np.int64)
        self.read_only = np.array([c.risk == "read" for c in self.catalog.cards])
        # The filter is deterministic per caller: its result, and which groups hold a visible tool.
        self._filters: dict[Caller, tuple[FilterResult, np.ndarray]] = {}
        self._qvecs: dict[str, np.ndarray] = {}  # recent query embeddings: expand() must not re-embed
        # Per-card order grouped by group, for a per-group max in one reduceat.
        self._by_group = np.argsort(self.group_of, kind="stable")
        counts = np.bincount(self.group_of, minlength=len(self.group_names))
        self._group_starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self._group_nonempty = counts > 0
        self._rg_tokens: dict[int, int] = {}  # per group: its tokens inside the request_group tool
        self._rg_base_tokens: int | None = None
        self._pool = None  # worker threads embedding queries while BM25 scores (overlap_bm25)
        # Per-field rankings (retrieval.w_bm25_fields / w_dense_fields): their indexes are built here,
        # never on a request.
        self._bm25_fields = self.retrieval.w_bm25_fields.weighted()
        self._dense_fields = self.retrieval.w_dense_fields.weighted()
        for f, _ in self._bm25_fields:
            index.field_bm25(f)
        for f, _ in self._dense_fields:
            index.field_vecs(f)
        # Sibling fill (retrieval.sibling_fill): per card, its namespace's id among the sibling namespaces (-1: none).
        sf = self.retrieval.sibling_fill
        self._sib_ns = namespace_ids(self.catalog.cards, sf.namespaces) if sf else None

    @classmethod
    def from_config(cls, cfg: ToolsConfig, index: ToolIndex | None = None) -> ToolRouter:
        if index is None:
            catalog = Catalog.from_files(cfg.catalog, default_risk=cfg.default_risk, duplicates=cfg.duplicates)
            index = ToolIndex.from_config(catalog, cfg)
        return cls(index, cfg.policy, cfg.retrieval, cfg.groups, cfg.pinned)

    def visible(self, caller: Caller) -> FilterResult:
        return self._visible(caller)[0]

    def _visible(self, caller: Caller) -> tuple[FilterResult, np.ndarray]:
        entry = self._filters.get(caller)
        if entry is None:
            if len(self._filters) > 1024:
                self._filters.clear()
            seen = self.policy.filter(self.catalog.cards, caller)
            entry = (seen, np.bincount(self.group_of[seen.visible], minlength=len(self.group_names)) > 0)
            self._filters[caller] = entry
        return entry

    def intents(self, query: str) -> list[str]:
        """The texts retrieved for `query`: the whole request, then its asks when it makes several."""
        parts = split_intents(query, self.retrieval.max_intents) if self.retrieval.max_intents > 1 else []
        return [query, *parts] if len(parts) > 1 else [query]

    def route(self, query: str, caller: Caller, top_k_override: int | None = None,
              qvecs: np.ndarray | None = None) -> RoutingDecision:
        """Route one request.

        `qvecs` lets a batch evaluation pass embeddings it already has: the rows of
        `self.intents(query)` (a single vector is the whole request's; the asks are
        then embedded here).
        """
        t0 = time.perf_counter()
        seen, group_visible = self._visible(caller)
        t1 = time.perf_counter()
        texts = self.intents(query)
        if qvecs is None and self.retrieval.overlap_bm25:
            # ONNX Runtime releases the GIL: BM25 scores the texts on this thread while the query embeds.
            pending = self._embedder().submit(self._vectors, texts, None)
            bm25 = [self.index.bm25_scores(t) for t in texts]
            fields = [self.field_scores(t) for t in texts]
            Q = pending.result()
        else:
            Q = self._vectors(texts, qvecs)
            bm25 = fields = None
        self._remember(query, Q[0])
        t2 = time.perf_counter()
        fused, dense = self.fuse(texts, Q, seen.visible, bm25, fields)
        t3 = time.perf_counter()
        asks = len(texts) - 1  # 0: one ask
        k = top_k_override or max(self.retrieval.top_k, self.retrieval.k_per_intent * asks)
        n_groups = max(self.gcfg.max_groups, asks)  # room for every ask's group
        chosen, conf, probs = self._select_groups(fused, dense, Q, seen.visible, n_groups)
        mode = "retrieval"
        picked = self._pick(fused, chosen, seen.visible, k)
        if conf < self.gcfg.confidence_threshold or picked.size == 0:
            mode = "widened"
            k *= self.gcfg.widen_k
            chosen, conf, probs = self._select_groups(fused, dense, Q, seen.visible, n_groups * self.gcfg.widen_groups)
            picked = self._pick(fused, chosen, seen.visible, k)
            if picked.size == 0:  # still nothing in the chosen groups: search everything visible
                picked = self.top(fused, k)
            if conf < self.gcfg.min_confidence:
                mode = "safe_default"
                picked = self._pick(fused, chosen, seen.visible & self.read_only, k)
                if picked.size == 0:
                    picked = self.top(np.where(seen.visible & self.read_only, fused, -np.inf), k)
        t4 = time.perf_counter()
        exposed = [i for i in self.pinned if seen.visible[i]] + [int(i) for i in picked if int(i) not in self.pinned]
        tools = [self.catalog.cards[i].to_openai() for i in exposed]
        rg_tool, rg_tokens = self._request_group_tool(chosen, probs, group_visible)
        tools.append(rg_tool)
        vis_tokens = int(self.index.schema_tokens[seen.visible].sum())
        after = int(self.index.schema_tokens[exposed].sum()) + rg_tokens
        t5 = time.perf_counter()
        ms = lambda a, b: round((b - a) * 1e3, 3)  # noqa: E731
        return RoutingDecision(
            query=query, tools=tools, tool_keys=[self.catalog.cards[i].key for i in exposed],
            groups=[{"name": self.group_names[g], "confidence": round(float(probs[g]), 4)} for g in chosen],
            confidence=round(float(conf), 4), mode=mode,
            hidden=seen.hidden_records(), catalog_version=self.catalog.version,
            timings_ms={"filter": ms(t0, t1), "embed": ms(t1, t2), "score": ms(t2, t3), "select": ms(t3, t4),
                        "bind": ms(t4, t5), "total": ms(t0, t5)},
            schema_tokens={"visible_catalog": vis_tokens, "exposed": after}, caller=caller.model_dump(),
            intents=texts[1:],
        )

    def embedding_plan(self, texts: list[str], have_whole: bool = False) -> tuple[list[str], int | None, bool]:
        """What routing embeds for `texts` (from `intents`): (texts to embed, token cap each, whole = mean of asks).

        The whole request is skipped when its vector is at hand (`have_whole`) or
        stands as the mean of the asks (`whole_vector="mean_of_asks"`); the token
        budget is shared by the texts embedded (each at least 16).
        """
        mean_whole = not have_whole and len(texts) > 1 and self.retrieval.whole_vector == "mean_of_asks"
        todo = texts[1:] if (have_whole or mean_whole) else texts
        budget = self.retrieval.query_token_budget
        cap = None if budget is None or not todo else max(16, budget // len(todo))
        return todo, cap, mean_whole

    def _vectors(self, texts: list[str], given: np.ndarray | None) -> np.ndarray:
        """Embeddings of `texts` (rows), reusing `given` rows and the recent whole-request cache."""
        rows = [] if given is None else list(np.atleast_2d(given))[: len(texts)]
        if len(rows) == len(texts):
            return np.stack(rows)
        if not rows and texts[0] in self._qvecs:
            rows = [self._qvecs[texts[0]]]
        todo, cap, mean_whole = self.embedding_plan(texts, have_whole=bool(rows))
        todo = todo[len(rows) - 1:] if len(rows) > 1 else todo
        if todo:
            rows += list(self.embed_texts(todo, cap))
        if mean_whole:
            rows.insert(0, unit_mean(rows))
        return np.stack(rows)

    def embed_texts(self, texts: list[str], cap: int | None) -> np.ndarray:
        """Query-side embeddings of a request's texts: packed into few passes (`pack_tokens`), never padded."""
        enc, pack = self.index.query_encoder, self.retrieval.pack_tokens
        if pack and hasattr(enc, "encode_packed"):
            return enc.encode_packed(texts, max_length=cap, pack_tokens=pack)
        # A padded batch pays for the longest text in every row: one text at a time instead.
        return enc.encode(texts, batch_size=1, max_length=cap)

    def _embed(self, query: str) -> np.ndarray:
        v = self._qvecs.get(query)
        return self.index.embed_query(query) if v is None else v

    def _remember(self, query: str, qvec: np.ndarray) -> None:
        if len(self._qvecs) >= 256:
            self._qvecs.pop(next(iter(self._qvecs)))
        self._qvecs[query] = qvec

    def _embedder(self):
        if self._pool is None:
            import os
            from concurrent.futures import ThreadPoolExecutor

            # One worker per core: concurrent requests (the gateway routes on worker threads)
            # must not queue behind each other's embeddings.
            self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="tool-embed")
        return self._pool

    def field_scores(self, text: str) -> dict[str, np.ndarray]:
        """Per-field BM25 scores of `text` for the fields weighted in `w_bm25_fields` (none: {})."""
        return self.index.field_bm25_scores(text, [f for f, _ in self._bm25_fields]) if self._bm25_fields else {}

    def _field_signals(self, fields: dict[str, np.ndarray], fcos: dict[str, np.ndarray], j: int) -> list:
        """The per-field rankings of text j for `rrf_fuse(extra=...)`: BM25 fields, then dense fields."""
        out = [(fields[f], w, fields[f] > 0) for f, w in self._bm25_fields]
        return out + [(fcos[f][:, j], w, self.index.field_vecs(f)[1]) for f, w in self._dense_fields]

    def fuse(self, texts: list[str], Q: np.ndarray, visible: np.ndarray, bm25: list[np.ndarray] | None = None,
             fields: list[dict[str, np.ndarray]] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Fused scores over visible cards, and each card's best cosine to any of the texts.

        Each text (the whole request, then each ask) gets its own BM25 + dense RRF
        (with the per-field rankings that are weighted; `fields`: their BM25 scores
        per text, from `field_scores`); a card's score is its best over the texts,
        an ask's scaled by `intent_weight`, so that every ask's best tools rise
        together. A sliver of the whole request's score breaks ties between asks.
        """
        r = self.retrieval
        bm25 = bm25 or [self.index.bm25_scores(t) for t in texts]
        fields = fields if fields is not None else [self.field_scores(t) for t in texts]
        cos = self.index.tool_vecs @ Q.T  # (cards, texts)
        fcos = {f: self.index.field_vecs(f)[0] @ Q.T for f, _ in self._dense_fields}
        fused = rrf_fuse(bm25[0], cos[:, 0], visible, r.rrf_k, r.w_bm25, r.w_dense, self._field_signals(fields[0], fcos, 0),
                         r.shortlist)
        if len(texts) > 1:
            best = fused.copy()
            for j in range(1, len(texts)):
                part = rrf_fuse(bm25[j], cos[:, j], visible, r.rrf_k, r.w_bm25, r.w_dense,
                                self._field_signals(fields[j], fcos, j), r.shortlist)
                np.maximum(best, r.intent_weight * part, out=best)
            fused = best + 1e-3 * fused
        return fused, cos.max(axis=1)

    def _select_groups(self, fused, dense, Q, visible, max_groups) -> tuple[list[int], float, np.ndarray]:
        """Groups of the best fused tools (recall first), confidence = their softmax mass.

        Group relevance is the best cosine of a visible tool in it or of its
        description (to any of the request's texts); the softmax over visible
        groups says how much of the probability the chosen groups hold.
        """
        G = len(self.group_names)
        # Best visible cosine per group: one reduceat over the cards sorted by group.
        rel = np.full(G, -np.inf)
        best = np.maximum.reduceat(np.where(visible, dense, -np.inf)[self._by_group], self._group_starts[self._group_nonempty])
        rel[self._group_nonempty] = best
        rel = np.where(np.isfinite(rel), np.maximum(rel, (self.index.group_vecs @ Q.T).max(axis=1)), -np.inf)
        probs = np.zeros(G)
        ok = np.isfinite(rel)
        if not ok.any():
            return [], 0.0, probs
        z = (rel[ok] - rel[ok].max()) / self.gcfg.temperature
        probs[ok] = np.exp(z) / np.exp(z).sum()
        chosen: list[int] = []
        for i in top_k(fused, self.gcfg.probe):
            g = int(self.group_of[i])
            if g not in chosen:
                chosen.append(g)
                if len(chosen) == max_groups:
                    break
        return chosen, float(probs[chosen].sum()), probs

    def top(self, fused: np.ndarray, k: int) -> np.ndarray:
        """The k cards exposed from `fused` (-inf: not allowed): score order, or sibling fill when configured."""
        if self._sib_ns is None:
            return top_k(fused, k)
        return sibling_top(fused, self._sib_ns, self.retrieval.sibling_fill.head, k)

    def ranking(self, fused: np.ndarray, n: int, k: int = 10) -> np.ndarray:
        """n cards best first, the first k as `top` would expose k (the evaluation's ranking: k = 10, its C@10 cut)."""
        sf = self.retrieval.sibling_fill
        return ranking(fused, self._sib_ns, sf.head if sf else None, n, k)

    def _pick(self, fused, chosen, allowed, k) -> np.ndarray:
        in_chosen = np.zeros(len(self.group_names), dtype=bool)
        in_chosen[chosen] = True
        return self.top(np.where(allowed & in_chosen[self.group_of], fused, -np.inf), k)

    def _request_group_tool(self, chosen, probs, group_visible) -> tuple[dict, int]:
        """request_group naming the most relevant visible groups not chosen, and its schema tokens."""
        cand = group_visible.copy()
        cand[chosen] = False
        others = np.flatnonzero(cand)
        n = min(self.gcfg.suggest_groups, others.size)
        if n < others.size:  # the n most probable, without sorting every group
            others = others[np.argpartition(-probs[others], n - 1)[:n]]
        others = others[np.lexsort((others, -probs[others]))][:n]  # most probable first, ties by group order
        groups = [self.catalog.groups[self.group_names[g]] for g in others]
        return request_group_tool(groups), self._request_group_tokens(others, groups)

    def _request_group_tokens(self, ids, groups) -> int:
        """Tokens of json.dumps(request_group tool), summed from cached per-group counts.

        The WordPiece tokenizer splits at whitespace and punctuation first, and every
        group's text in the tool's JSON is bounded by punctuation ("; ", quotes, ", "),
        so the count adds up exactly (tested against counting the whole JSON).
        """
        count = self.index.encoder.count_tokens
        if self._rg_base_tokens is None:
            self._rg_base_tokens = count(json.dumps(request_group_tool([])))
            self._rg_sep = count(";") + count(",")  # between two groups: "; " in the listing, ", " in the enum
        total = self._rg_base_tokens + max(0, len(groups) - 1) * self._rg_sep
        for g, card in zip(ids, groups):
            g = int(g)
            if g not in self._rg_tokens:
                self._rg_tokens[g] = (count(json.dumps(f"{card.name}: {card.description}")[1:-1])
                                      + count(json.dumps(card.name)))
            total += self._rg_tokens[g]
        return total

    # -- the way back, and the guard on model outputs ----------------------------

    def expand(self, decision: RoutingDecision, group: str, caller: Caller) -> Expansion:
        """The agent called request_group(group): add that group's best visible tools; record it."""
        seen = self.visible(caller)
        if group not in self.group_names:
            exp = Expansion(group, False, [], "unknown_group")
        else:
            g = self.group_names.index(group)
            mask = seen.visible & (self.group_of == g)
            if not mask.any():  # hidden and non-existent groups answer alike: nothing leaks
                exp = Expansion(group, False, [], "unknown_group")
            else:
                qvec = self._embed(decision.query)
                bm25, dense = self.index.scores(decision.query, qvec)
                fcos = {f: (self.index.field_vecs(f)[0] @ qvec)[:, None] for f, _ in self._dense_fields}
                fused = rrf_fuse(bm25, dense, mask, self.retrieval.rrf_k, self.retrieval.w_bm25, self.retrieval.w_dense,
                                 self._field_signals(self.field_scores(decision.query), fcos, 0))
                have = set(decision.tool_keys)
                new = [int(i) for i in top_k(fused, self.gcfg.expand_k + len(have)) if self.catalog.cards[i].key not in have]
                new = new[: self.gcfg.expand_k]
                decision.tools[-1:-1] = [self.catalog.cards[i].to_openai() for i in new]
                decision.tool_keys += [self.catalog.cards[i].key for i in new]
                exp = Expansion(group, True, [self.catalog.cards[i].key for i in new])
        decision.expansions.append(exp)
        return exp

    def check_call(self, decision: RoutingDecision, name: str) -> CallCheck:
        """A model named `name`: valid only when it is exactly one of the exposed tools."""
        if name in decision.exposed_names:
            return CallCheck(True)
        # One answer for hidden, unknown and merely not-chosen tools, so a caller
        # cannot probe which tools exist; and no fuzzy matching to a near name.
        return CallCheck(False, f"{name!r} was not offered for this request", "tool_error:not_exposed")
