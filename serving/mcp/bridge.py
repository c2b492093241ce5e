"""Upstream tools → the tool catalog: namespaced cards, their groups, and a retrieval index built incrementally.

    snap = Bridge(cfg, encoder, query_encoder).snapshot(upstreams)   # Snapshot: catalog, router, entries
    snap.entries["files__read_text_file"].tool                         # the upstream's own definition

Each upstream tool becomes a card with `namespace` = the server's name and the
exposed name `<server><separator><tool>` (`files__search_files`), so two
servers' `search` never collide; risk comes from its MCP annotations
(`readOnlyHint` → read, `destructiveHint: false` → write, else irreversible;
none → write), then the server's `defaults` and `tools:` patterns apply; a tool
annotated `openWorldHint: true` also needs `open_world_permission`. Its
group: a `tools:` pattern's `group`, else the first declared group whose
patterns match, else the server's name. A server that is down keeps its last
listing in the catalog (its cards are masked per request, `Snapshot.live`), so
a server going down and back does not rebuild the index. Embeddings are cached
per retrieval text: a listing that changes one tool embeds one tool.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import threading
from dataclasses import dataclass, field

import mcp_types as types
import numpy as np

from serving.mcp.config import McpConfig, UpstreamConfig
from serving.mcp.upstream import Upstream
from serving.tools.cards import GroupCard, ToolCard, search_text, split_identifier
from serving.tools.catalog import Catalog
from serving.tools.index import ToolIndex
from serving.tools.loaders import card_from_entry
from serving.tools.router import ToolRouter

log = logging.getLogger("switchcraft.mcp")


@dataclass(frozen=True)
class Entry:
    """One exposed tool: its card's row, its server, the server's own definition and the one a host sees
    (the upstream's, under the namespaced name)."""

    name: str
    row: int
    upstream: str
    tool: types.Tool
    listed: types.Tool


@dataclass
class Snapshot:
    catalog: Catalog
    router: ToolRouter | None  # None: no tools yet
    entries: dict[str, Entry]  # exposed name → entry, in catalog order
    by_row: list[Entry]
    card_upstream: np.ndarray  # per card: its upstream's position in `upstream_names`
    upstream_names: list[str]
    skipped: list[str] = field(default_factory=list)  # tools left out, with why
    group_rows: dict[str, np.ndarray] = field(default_factory=dict)  # group → its rows, in catalog order
    read_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # risk "read" rows

    def __post_init__(self) -> None:
        groups: dict[str, list[int]] = {}
        for i, c in enumerate(self.catalog.cards):
            groups.setdefault(c.group_name, []).append(i)
        self.group_rows = {g: np.array(r, dtype=np.int64) for g, r in groups.items()}
        self.read_rows = np.array([i for i, c in enumerate(self.catalog.cards) if c.risk == "read"], dtype=np.int64)

    def live(self, up: dict[str, bool]) -> np.ndarray:
        """Per card: its server is up now."""
        flags = np.array([up.get(n, False) for n in self.upstream_names] + [False], dtype=bool)
        return flags[self.card_upstream] if len(self.card_upstream) else np.zeros(0, dtype=bool)


def tool_card(up: UpstreamConfig, tool: types.Tool, separator: str, groups: list,
              open_world: str | None = None) -> ToolCard:
    """The card of one upstream tool (ValueError when its definition cannot be one). A tool annotated
    `openWorldHint: true` reaches beyond the server (URLs, other hosts: a request forgery path whatever its risk)
    and also needs `open_world` (the config's open_world_permission), on top of what the config sets."""
    ann = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    entry = {"name": tool.name, "description": tool.description or tool.title or "",
             "inputSchema": tool.input_schema or {"type": "object"}}
    if ann:
        entry["annotations"] = ann
    card = card_from_entry(entry)
    # The card's name is the server's whole tool name (a dotted `math.factorial` is not split: its key must be
    # unique within the server, whatever dots it holds).
    update = {"name": tool.name, "namespace": up.name, "call_name": f"{up.name}{separator}{tool.name}",
              "group": up.name, **up.defaults.update()}
    exposed = update["call_name"]
    for g in groups:
        if any(fnmatch.fnmatchcase(exposed, p) for p in g.tools):
            update["group"] = g.name
            break
    for pattern, fields in up.tools.items():
        if fnmatch.fnmatchcase(tool.name, pattern):
            update.update(fields.update())
    if open_world and ann and ann.get("openWorldHint") is True:
        update["permissions"] = [*dict.fromkeys([*update.get("permissions", card.permissions), open_world])]
    return ToolCard.model_validate({**card.model_dump(), **update})


class Bridge:
    """Builds snapshots of the upstreams' tools; keeps the embeddings of texts already seen."""

    def __init__(self, cfg: McpConfig, encoder, query_encoder=None) -> None:
        self.cfg, self.encoder, self.query_encoder = cfg, encoder, query_encoder or encoder
        self._vecs: dict[str, np.ndarray] = {}
        self._tokens: dict[str, int] = {}
        self._lock = threading.Lock()

    def snapshot(self, upstreams: list[Upstream]) -> Snapshot:
        cards, entries, owners, skipped = [], [], [], []
        seen: set[str] = set()
        for u, up in enumerate(upstreams):
            for tool in up.tools:
                try:
                    card = tool_card(up.cfg, tool, self.cfg.separator, self.cfg.groups, self.cfg.open_world_permission)
                except ValueError as e:
                    skipped.append(f"{up.name}: {tool.name}: {str(e).splitlines()[0]}")
                    continue
                if card.exposed_name in seen:
                    skipped.append(f"{up.name}: {tool.name}: listed twice")
                    continue
                seen.add(card.exposed_name)
                listed = tool.model_copy(update={"name": card.exposed_name, "meta": None})
                entries.append(Entry(card.exposed_name, len(cards), up.name, tool, listed))
                cards.append(card)
                owners.append(u)
        for s in skipped:
            log.warning("mcp tool left out: %s", s)
        described = {g.name: g.description for g in self.cfg.groups}
        described.update({up.name: up.cfg.description or f"tools of the MCP server {up.name}" for up in upstreams
                          if up.name not in described})
        used = {c.group_name for c in cards}
        groups = [GroupCard(name=n, description=d) for n, d in described.items() if n in used]
        catalog = Catalog(cards, groups, sources=[f"mcp:{up.name}" for up in upstreams])
        router = None
        if cards:
            with self._lock:
                index = self._index(catalog)
            router = ToolRouter(index, self.cfg.policy, self.cfg.retrieval)
        return Snapshot(catalog, router, {e.name: e for e in entries}, entries,
                        np.array(owners, dtype=np.int64), [up.name for up in upstreams], skipped)

    def _index(self, catalog: Catalog) -> ToolIndex:
        """A ToolIndex embedding only texts not embedded before (tool texts, group texts)."""
        tool_texts = [search_text(c) for c in catalog.cards]
        group_texts = [f"{split_identifier(g)}: {catalog.groups[g].description}" for g in catalog.group_names()]
        todo = [t for t in dict.fromkeys(tool_texts + group_texts) if t not in self._vecs]
        if todo:
            for t, v in zip(todo, self.encoder.encode(todo, batch_size=32)):
                self._vecs[t] = v
        dim = self.encoder.dim
        stack = lambda texts: np.stack([self._vecs[t] for t in texts]) if texts else np.zeros((0, dim), np.float32)  # noqa: E731
        defs = [json.dumps(c.to_openai()) for c in catalog.cards]
        for d in defs:
            if d not in self._tokens:
                self._tokens[d] = self.encoder.count_tokens(d)
        tokens = np.array([self._tokens[d] for d in defs], dtype=np.int64)
        return ToolIndex(catalog, self.encoder, stack(tool_texts), stack(group_texts), tokens,
                         query_encoder=self.query_encoder)
