"""Training pairs for the tool retriever: query → the text of a tool it needs, plus a BM25-mined hard negative.

    from evaluation.tools.pairs import training_pairs
    pairs, counts = training_pairs("../shared/data", TrainDataConfig())

Sources, training only: xLAM and Glaive (each query → each tool it calls,
negatives from all that source's tools), BFCL v4 live (the half of its real user
queries `evaluation.tools.data` marks `train`; negatives from the BFCL catalog),
Seal-Tools dev (its DPR dev pairs are these same queries) and MetaTool's fixed
tenth. BFCL v1 and the v4 categories repeating it never appear. Any query whose
text (case and spaces folded) is also a held-out query of a benchmark is
dropped, so no evaluated query is trained on even where sources overlap.

A query calling several tools gives one pair per tool, and when it splits into
as many asks (`serving.tools.intents`) as it calls tools, each ask is paired with
its call too: the router embeds asks on their own. The hard negative is the best
BM25 match in the same catalog that is not a needed tool (nor a schema variant of
one: BFCL's `name~2`), so in-batch negatives teach the topic and the mined one
teaches the near miss.

This module lives in `evaluation/` because the held-out split it must respect is
defined by the benchmark readers; the training loop itself is
`training/tool_retriever.py`, which only sees texts.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from pathlib import Path

import numpy as np

from evaluation.tools.data import Benchmark, Query, read_benchmark
from serving.tools.cards import ToolCard, search_text
from serving.tools.catalog import Catalog
from serving.tools.index import bm25_tokens
from serving.tools.intents import split_intents
from serving.tools.loaders import card_from_entry
from training.tool_retriever import Pair, TrainDataConfig

BENCHMARKS = ("bfcl", "metatool", "seal_tools", "stabletoolbench")


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def _variant_base(key: str) -> str:
    head, sep, tail = key.rpartition("~")
    return head if sep and tail.isdigit() else key


class NegativeMiner:
    """BM25 over one catalog's card texts (the serving tokenisation): the best-matching card that is not needed."""

    def __init__(self, cards: list[ToolCard]):
        import bm25s
        import Stemmer

        self.cards, self.texts = cards, [search_text(c) for c in cards]
        self._stem = Stemmer.Stemmer("english")
        self.bm25 = bm25s.BM25()
        self.bm25.index([bm25_tokens(t, self._stem) or ["<empty>"] for t in self.texts], show_progress=False)
        self._vocab = self.bm25.vocab_dict

    def hard_negative(self, query: str, needed: set[str], depth: int = 20) -> str | None:
        toks = [t for t in bm25_tokens(query, self._stem) if t in self._vocab]
        if not toks:
            return None
        scores = np.asarray(self.bm25.get_scores(toks))
        bases = {_variant_base(k) for k in needed}
        needed_texts = {self.texts[i] for i, c in enumerate(self.cards) if c.key in needed}
        for i in np.argsort(-scores, kind="stable")[:depth]:
            c = self.cards[int(i)]
            if scores[i] <= 0:
                break
            if _variant_base(c.key) not in bases and self.texts[int(i)] not in needed_texts:
                return self.texts[int(i)]
        return None


def _pairs_of(bench: Benchmark, queries: list[Query], source: str, cfg: TrainDataConfig) -> list[Pair]:
    miner = NegativeMiner(bench.catalog.cards)
    text_of = {c.key: t for c, t in zip(miner.cards, miner.texts)}
    out = []
    for q in queries:
        needed = set(q.needed)
        asks = split_intents(q.text, 6) if len(q.needed) > 1 else []
        items = [(q.text, k) for k in q.needed]
        if cfg.ask_pairs and len(asks) == len(q.needed):
            items += list(zip(asks, q.needed))
        for text, key in items:
            neg = miner.hard_negative(text, needed) if cfg.hard_negatives else None
            out.append(Pair(text, text_of[key], neg, source))
    return out


def _source_benchmark(name: str, location: Path) -> Benchmark:
    """xLAM or Glaive as a benchmark: catalog = every tool the source offers (deduped by name and schema)."""
    import json

    from data.sources import read_source

    cards: dict[str, ToolCard] = {}
    by_doc: dict[str, str] = {}
    uses: Counter = Counter()
    queries = []
    for ex in read_source(name, str(location)):
        if not ex.expected.alternatives or not ex.expected.alternatives[0] or not ex.question.strip():
            continue
        keys = {}
        for t in ex.tools:
            doc = json.dumps([t.name, t.parameters], sort_keys=True)
            if doc not in by_doc:
                card = card_from_entry({"name": t.name, "description": t.description, "parameters": t.parameters},
                                       default_risk="read")
                uses[card.key] += 1
                if uses[card.key] > 1:  # one name in several schemas: name~2, … (as the BFCL catalog does)
                    card = card.model_copy(update={"name": f"{card.name}~{uses[card.key]}"})
                cards[card.key] = card
                by_doc[doc] = card.key
            keys[t.name] = by_doc[doc]
        needed = list(dict.fromkeys(keys[c.name] for c in ex.expected.alternatives[0] if c.name in keys))
        if needed:
            queries.append(Query(ex.id, ex.question, needed, len(needed), name, "train"))
    return Benchmark(name, Catalog(list(cards.values())), queries)


def heldout_texts(data_root: str | Path) -> frozenset[str]:
    """Every evaluated query's text, folded: nothing here may be trained on (read once per data root)."""
    return _heldout_texts(str(Path(data_root).resolve()))


@functools.lru_cache(maxsize=4)
def _heldout_texts(root: str) -> frozenset[str]:
    return frozenset(_fold(q.text) for name in BENCHMARKS for q in read_benchmark(name, root, heldout=True).queries)


def training_pairs(data_root: str | Path, cfg: TrainDataConfig | None = None, log=print
                   ) -> tuple[list[Pair], dict[str, dict[str, int]]]:
    """(pairs, per source: queries read, dropped as evaluated, used; pairs) — sampled per `cfg.max_queries`."""
    cfg = cfg or TrainDataConfig()
    root = Path(data_root)
    forbidden = heldout_texts(root)
    benches: list[tuple[str, Benchmark]] = []
    for name in cfg.sources:
        if name == "xlam":
            benches.append((name, _source_benchmark("xlam", root / "xlam/rows.jsonl")))
        elif name == "glaive":
            benches.append((name, _source_benchmark("glaive", root / "glaive/glaive_toolcall_en_demo.json")))
        elif name in ("bfcl_live", "seal_tools_dev", "metatool"):
            bench = read_benchmark({"bfcl_live": "bfcl", "seal_tools_dev": "seal_tools"}.get(name, name), root)
            benches.append((name, bench))
        else:
            raise KeyError(f"unknown training source {name!r}; known: xlam, glaive, bfcl_live, seal_tools_dev, metatool")
    pairs, counts = [], {}
    for name, bench in benches:
        train = [q for q in bench.queries if q.domain == "train"]
        clean = [q for q in train if _fold(q.text) not in forbidden]
        cap = cfg.max_queries.get(name)
        used = random.Random(cfg.seed).sample(clean, cap) if cap is not None and len(clean) > cap else clean
        made = _pairs_of(bench, used, name, cfg)
        got = [p for p in made if _fold(p.query) not in forbidden]  # an ask may read like an evaluated query
        counts[name] = {"queries": len(train), "dropped_as_evaluated": len(train) - len(clean), "used": len(used),
                        "pairs": len(got), "ask_pairs_dropped_as_evaluated": len(made) - len(got), "with_hard_negative": sum(p.negative is not None for p in got),
                        "catalog": len(bench.catalog)}
        log(f"training pairs, {name}: {counts[name]}")
        pairs += got
    assert not {_fold(p.query) for p in pairs} & forbidden  # the promise of this module
    return pairs, counts


def training_asks(pairs: list[Pair], max_parts: int, forbidden: frozenset[str] | set[str]) -> list[str]:
    """The asks serving would embed one by one for the training queries (`split_intents`), not already a query.

    For the distilled query encoder, which must embed asks as the trained one does. An ask whose folded text
    is in `forbidden` (`heldout_texts`) is left out, like a training query.
    """
    queries = {p.query for p in pairs}
    asks = {a for q in queries for a in split_intents(q, max_parts) if a != q}
    return sorted(a for a in asks - queries if _fold(a) not in forbidden)
