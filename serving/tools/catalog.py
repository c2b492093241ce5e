"""A versioned tool catalog: unique cards, their groups, and a content hash.

The version is a hash of every card and group (canonical JSON), so an index
built from a catalog can be found again, and a decision names exactly which
catalog it came from. Groups not described in any file are derived from the
cards' namespaces (or their explicit `group`).

    from serving.tools.catalog import Catalog
    catalog = Catalog.from_files(["cards/payments.yaml", "mcp_tools.json"])
    print(catalog.version, len(catalog), catalog.group_names())
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from data.errors import DataError
from serving.tools.cards import GroupCard, ToolCard
from serving.tools.loaders import load_cards

REQUEST_GROUP = "request_group"


class Catalog:
    """Cards in a fixed order (their index is the row in the retrieval index)."""

    def __init__(self, cards: Sequence[ToolCard], groups: Iterable[GroupCard] = (), *, sources: Sequence[str] = ()):
        self.cards: list[ToolCard] = list(cards)
        self.sources = list(sources)
        self.position: dict[str, int] = {}
        self._by_exposed: dict[str, int] = {}
        for i, c in enumerate(self.cards):
            for table, name in ((self.position, c.key), (self._by_exposed, c.exposed_name)):
                if name in table:
                    raise DataError(f"duplicate tool name {name!r} (cards {table[name]} and {i})", field="name",
                                    hint="give one of them a namespace or a different name")
                table[name] = i
            if c.exposed_name == REQUEST_GROUP:
                raise DataError(f"{REQUEST_GROUP!r} is reserved for the router's own tool", field="name")
        self.groups: dict[str, GroupCard] = {}
        for g in groups:
            if g.name in self.groups:
                raise DataError(f"group {g.name!r} is described twice", field="groups")
            self.groups[g.name] = g
        self.members: dict[str, list[int]] = {}
        for i, c in enumerate(self.cards):
            self.members.setdefault(c.group_name, []).append(i)
        for name in self.members:  # derived groups: described by their namespace
            self.groups.setdefault(name, GroupCard(name=name, description=f"tools in {name}"))
        self.version = self._hash()

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], *, default_risk: str | None = None,
                   duplicates: str = "error") -> Catalog:
        """`duplicates="rename"` keeps a second tool of the same name as `name~2` (…~3, …):
        for benchmark pools such as BFCL's, which hold one function name in several schemas."""
        if duplicates not in ("error", "rename"):
            raise ValueError(f"duplicates must be 'error' or 'rename', not {duplicates!r}")
        cards, groups, seen = [], [], {}
        for p in paths:
            cs, gs = load_cards(p, default_risk=default_risk)
            for c in cs:
                if c.key in seen and duplicates == "rename":
                    n = 2
                    while f"{c.key}~{n}" in seen:
                        n += 1
                    c = c.model_copy(update={"name": f"{c.name}~{n}", "call_name": f"{c.exposed_name}~{n}" if c.call_name else ""})
                elif c.key in seen:
                    raise DataError(f"tool {c.key!r} is also defined in {seen[c.key]}", path=p, field="name",
                                    hint="tool keys (namespace.name) must be unique; or set duplicates: rename")
                seen[c.key] = str(p)
                cards.append(c)
            groups += gs
        return cls(cards, groups, sources=[str(p) for p in paths])

    def __len__(self) -> int:
        return len(self.cards)

    def group_names(self) -> list[str]:
        return sorted(self.members)

    def _hash(self) -> str:
        h = hashlib.sha256()
        for c in self.cards:
            h.update(json.dumps(c.model_dump(mode="json"), sort_keys=True).encode())
        for name in sorted(self.groups):
            h.update(json.dumps(self.groups[name].model_dump(mode="json"), sort_keys=True).encode())
        return h.hexdigest()[:16]


def request_group_tool(groups: Sequence[GroupCard]) -> dict:
    """The tool always offered: ask for a group that was left out.

    The enum lists only groups the caller may see, so it reveals nothing else.
    """
    listing = "; ".join(f"{g.name}: {g.description}" for g in groups)
    return {
        "type": "function",
        "function": {
            "name": REQUEST_GROUP,
            "description": "Ask for more tools when none of the offered ones fits. Groups: " + listing,
            "parameters": {
                "type": "object",
                "properties": {"group": {"type": "string", "enum": [g.name for g in groups]}},
                "required": ["group"],
            },
        },
    }
