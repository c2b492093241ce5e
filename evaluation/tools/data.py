"""Tool-retrieval benchmarks as (catalog, queries): BFCL, MetaTool, Seal-Tools, StableToolBench.

Each reader returns a `Benchmark`: a `Catalog` of cards and the queries, each
with the catalog keys of the tools it needs. Readers only read; the files are
under `../shared/data/` (see its README and tool_retrieval/PROVENANCE.md).

Every query has a `domain`, fixed here and nowhere else: `train` (the trained
retriever learns from it, `evaluation.tools.pairs`; never evaluated), `in`
(held out, from a catalog and distribution the retriever was trained on) or
`out` (held out, nothing like it trained on). BFCL v4 live: a fixed half by
hash of the id trains, the other half is `in`; BFCL v1 and the v4 categories
that repeat it are `out` (never trained on); MetaTool single: a fixed tenth
trains, the rest and multi are `in`; Seal-Tools: dev trains (its DPR dev
pairs are the same queries), test_in_domain is `in`, test_out_domain `out`;
StableToolBench: all `out`.

    from evaluation.tools.data import read_benchmark
    bench = read_benchmark("bfcl", data_root="../shared/data")
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from data.errors import DataError
from data.tools import normalize_schema
from serving.tools.cards import ToolCard
from serving.tools.catalog import Catalog
from serving.tools.loaders import card_from_entry

BFCL_SINGLE_TURN = ("simple", "multiple", "parallel", "java", "javascript", "live_", "executable_")


@dataclass
class Query:
    id: str
    text: str
    needed: list[str]  # catalog keys, distinct, in the order of the expected calls
    n_calls: int = 1
    split: str = ""  # e.g. the source category; reports break figures down by it
    domain: str = "out"  # train (never evaluated) | in | out: see the module docstring
    offered: list[str] = field(default_factory=list)  # BFCL: catalog keys of every doc the question came with


def in_fraction(key: str, fraction: float) -> bool:
    """A fixed pseudo-random `fraction` of ids, the same on every machine (SHA-256 of the id)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) < fraction * 0x100000000


BFCL_LIVE_TRAIN = 0.5  # of BFCL v4 live queries (real user questions): trained on; the rest held out, in-domain
METATOOL_TRAIN = 0.1  # of MetaTool's single-tool queries


@dataclass
class Benchmark:
    name: str
    catalog: Catalog
    queries: list[Query]
    notes: list[str] = field(default_factory=list)
    pool_keys: list[str] = field(default_factory=list)  # BFCL: the cards of thousand_tools' 2,405-function pool


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s.strip()).strip("_") or "x"


# -- BFCL --------------------------------------------------------------------------


def _doc_key(doc: dict) -> str:
    fn = doc["function"] if doc.get("type") == "function" else doc
    return fn["name"] + "\x00" + json.dumps(normalize_schema(fn.get("parameters") or {}), sort_keys=True)


class _BfclCatalogBuilder:
    """Dedupes function docs by name + schema; same name, other schema → `name~2`, …"""

    def __init__(self):
        self.cards: list[ToolCard] = []
        self.by_doc: dict[str, str] = {}
        self.name_uses: dict[str, int] = {}

    def add(self, doc: dict) -> str:
        k = _doc_key(doc)
        if k in self.by_doc:
            return self.by_doc[k]
        card = card_from_entry(doc, default_risk="read")
        n = self.name_uses.get(card.exposed_name, 0) + 1
        self.name_uses[card.exposed_name] = n
        if n > 1:  # a different schema under a name already taken: keep both, distinctly named
            card = card.model_copy(update={"name": f"{card.name}~{n}", "call_name": f"{card.exposed_name}~{n}"})
        self.cards.append(card)
        self.by_doc[k] = card.key
        return card.key


def read_bfcl(data_root: str | Path, bfcl_eval_data: str | Path | None = None) -> Benchmark:
    """Catalog: thousand_tools (2,405) + every doc in BFCL v1 and v4; queries: their single-turn questions."""
    from data.sources import read_source

    root = Path(data_root)
    if bfcl_eval_data is None:
        import bfcl_eval

        bfcl_eval_data = Path(bfcl_eval.__file__).parent / "data"
    b = _BfclCatalogBuilder()
    pool = root / "bfcl_v4_outputs/thousand_tools/all_unique_functions.json"
    pool_keys = list(dict.fromkeys(b.add(row["function"]) for row in json.loads(pool.read_text())))
    queries, notes = [], []
    for source, loc in (("bfcl_v1", root / "bfcl_v1"), ("bfcl_v4", bfcl_eval_data)):
        examples = read_source(source, str(loc))
        for ex in examples:
            keys = {t.name: b.add(t.original) for t in ex.tools}
            single_turn = ex.category.startswith(BFCL_SINGLE_TURN)
            if not ex.expected.alternatives or not single_turn:  # no_call, any_call: no needed tool
                continue
            calls = ex.expected.alternatives[0]
            # BFCL v1 parallel answers sometimes number repeated calls ("calculate_bmi 1").
            names = [c.name if c.name in keys else re.sub(r" \d+$", "", c.name) for c in calls]
            missing = [n for n in names if n not in keys]
            if missing:
                notes.append(f"{ex.id}: expected {missing} not among its docs; skipped")
                continue
            needed = list(dict.fromkeys(keys[n] for n in names))
            live = source == "bfcl_v4" and ex.category.startswith("live_")
            domain = ("train" if in_fraction(ex.id, BFCL_LIVE_TRAIN) else "in") if live else "out"
            queries.append(Query(ex.id, ex.question, needed, len(calls), f"{source}:{ex.category}", domain,
                                 list(dict.fromkeys(keys.values()))))
    return Benchmark("bfcl", Catalog(b.cards, sources=[str(pool), str(root / "bfcl_v1"), str(bfcl_eval_data)]), queries, notes,
                     pool_keys)


# -- MetaTool, Seal-Tools, StableToolBench -----------------------------------------


def read_metatool(data_root: str | Path) -> Benchmark:
    d = Path(data_root) / "tool_retrieval/metatool/dataset"
    des = json.loads((d / "plugin_des.json").read_text())
    cards = [ToolCard(name=_slug(n), description=t, risk="read") for n, t in des.items()]
    key = {n: _slug(n) for n in des}
    queries = []
    with open(d / "data/all_clean_data.csv", newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            qid = f"metatool:single:{i}"
            queries.append(Query(qid, row["Query"], [key[row["Tool"]]], 1, "single",
                                 "train" if in_fraction(qid, METATOOL_TRAIN) else "in"))
    for i, row in enumerate(json.loads((d / "data/multi_tool_query_golden.json").read_text())):
        needed = list(dict.fromkeys(key[t] for t in row["tool"]))
        queries.append(Query(f"metatool:multi:{i}", row["query"], needed, len(row["tool"]), "multi", "in"))
    return Benchmark("metatool", Catalog(cards, sources=[str(d)]), queries)


def read_seal_tools(data_root: str | Path) -> Benchmark:
    d = Path(data_root) / "tool_retrieval/seal_tools/Seal-Tools_Dataset"
    cards, key = [], {}
    for n, line in enumerate((d / "tool.jsonl").read_text().splitlines(), 1):
        row = json.loads(line)
        key[row["api_name"]] = _slug(row["api_name"])  # a few names hold spaces
        params = {"type": "object", "properties": row.get("parameters") or {}, "required": row.get("required") or []}
        try:
            cards.append(card_from_entry({"name": key[row["api_name"]], "description": row["api_description"],
                                          "parameters": params}, default_risk="read")
                         .model_copy(update={"group": _slug(row.get("field", "").split("/")[0])}))
        except (ValueError, KeyError) as e:
            raise DataError(str(e), path=d / "tool.jsonl", line=n) from None
    queries = []
    for split, domain in (("dev", "train"), ("test_in_domain", "in"), ("test_out_domain", "out")):
        for line in (d / f"{split}.jsonl").read_text().splitlines():
            row = json.loads(line)
            needed = list(dict.fromkeys(key[c["api"]] for c in row["calling"]))
            queries.append(Query(f"seal:{row['id']}", row["query"], needed, len(row["calling"]), split, domain))
    return Benchmark("seal_tools", Catalog(cards, sources=[str(d)]), queries)


def read_stabletoolbench(data_root: str | Path) -> Benchmark:
    """Catalog: every candidate API of the 765 test queries (2,479 APIs); groups: RapidAPI categories."""
    d = Path(data_root) / "tool_retrieval/stabletoolbench/solvable_queries/test_instruction"
    cards: dict[tuple[str, str], ToolCard] = {}
    queries = []
    for f in sorted(d.glob("*.json")):
        for row in json.loads(f.read_text()):
            for api in row["api_list"]:
                k = (api["tool_name"], api["api_name"])
                if k not in cards:
                    props = {p["name"]: {"type": str(p.get("type", "string")).lower(), "description": p.get("description", "")}
                             for p in api.get("required_parameters", []) + api.get("optional_parameters", [])}
                    cards[k] = ToolCard(
                        namespace=_slug(api["tool_name"]), name=_slug(api["api_name"]), group=_slug(api["category_name"]),
                        description=f"{api['tool_name']}: {api.get('api_description') or ''}".strip(),
                        parameters=normalize_schema({"type": "object", "properties": props,
                                                     "required": [p["name"] for p in api.get("required_parameters", [])]}),
                        risk="read")
            needed = [cards[tuple(r)].key for r in row["relevant APIs"] if tuple(r) in cards]
            if needed:
                queries.append(Query(f"stb:{f.stem}:{row['query_id']}", row["query"], list(dict.fromkeys(needed)),
                                     len(row["relevant APIs"]), f.stem))
    return Benchmark("stabletoolbench", Catalog(list(cards.values()), sources=[str(d)]), queries)


READERS = {"bfcl": read_bfcl, "metatool": read_metatool, "seal_tools": read_seal_tools,
           "stabletoolbench": read_stabletoolbench}


def read_benchmark(name: str, data_root: str | Path = "../shared/data", heldout: bool = False) -> Benchmark:
    """One benchmark; `heldout=True` drops the queries the trained retriever learns from (domain `train`)."""
    if name not in READERS:
        raise KeyError(f"unknown tool benchmark {name!r}; known: {', '.join(READERS)}")
    bench = READERS[name](data_root)
    if heldout:
        bench.queries = [q for q in bench.queries if q.domain != "train"]
    return bench
