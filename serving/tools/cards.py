"""Tool cards: what the router knows about each tool, and the groups they form.

A card is the unit of the catalog: identity (namespace, name, version), what
the tool does and when (not) to use it, its JSON Schema, and the facts the
permission filter needs (permissions, roles, tenants, environments, health,
risk). Cards are validated on load; `serving.tools.loaders` turns files into
cards and names the file and entry when a card is bad.

    from serving.tools.cards import ToolCard
    card = ToolCard(name="refund", namespace="payments", description="Refund a charge", risk="irreversible")
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


Risk = Literal["read", "write", "irreversible"]
Health = Literal["healthy", "degraded", "down"]

# Risk levels in increasing order: a policy allowing "write" also allows "read".
RISK_ORDER: dict[str, int] = {"read": 0, "write": 1, "irreversible": 2}


class ToolCard(BaseModel):
    """One tool in the catalog. `key` ("namespace.name", or "name" with no
    namespace) is unique in a catalog and is the name the model sees."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    namespace: str = ""
    description: str = ""
    when_to_use: str = ""
    when_not_to_use: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    tags: list[str] = Field(default_factory=list)
    # Access: every permission listed is required; roles/tenants/environments
    # listed restrict to those (an empty list means "no restriction").
    permissions: list[str] = Field(default_factory=list)
    roles: list[str] = Field(default_factory=list)
    tenants: list[str] = Field(default_factory=list)
    environments: list[str] = Field(default_factory=list)
    # Unknown risk is treated as "write": a tool of unknown effect is not read-only.
    risk: Risk = "write"
    health: Health = "healthy"
    version: str = "1"
    cost: float = Field(default=0.0, ge=0.0)  # USD (or any unit) per call, for the caller's budget
    group: str = ""  # explicit group; otherwise the namespace is the group
    # The name the model is shown; defaults to `key`. Set when the source's own
    # name must be kept (e.g. BFCL expects `math.factorial`, not `ns.math.factorial`).
    call_name: str = ""

    @field_validator("name", "namespace", "group")
    @classmethod
    def _no_spaces(cls, v: str) -> str:
        if any(c.isspace() for c in v):
            raise ValueError(f"{v!r} contains whitespace; use letters, digits, '_', '-', '.'")
        return v

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type", "object") != "object":
            raise ValueError(f"parameters must be a JSON Schema object (type 'object'), got type {v.get('type')!r}")
        return v

    @property
    def key(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name

    @property
    def exposed_name(self) -> str:
        return self.call_name or self.key

    @property
    def group_name(self) -> str:
        return self.group or self.namespace or "default"

    def to_openai(self) -> dict[str, Any]:
        """The tool definition bound to a request (OpenAI `tools` entry)."""
        desc = self.description
        if self.when_to_use:
            desc += f" Use when: {self.when_to_use}"
        if self.when_not_to_use:
            desc += f" Do not use when: {self.when_not_to_use}"
        return {"type": "function", "function": {"name": self.exposed_name, "description": desc.strip(), "parameters": self.parameters}}


class GroupCard(BaseModel):
    """A group of tools for one kind of task, with a one-line "use for …"."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""


def search_text(card: ToolCard) -> str:
    """What retrieval reads for a card: name words, description, usage notes, tags, parameters.

    Names are split into words (`get_stock_price` → "get stock price") because
    queries say what they want in words, not in identifiers.
    """
    params = card.parameters.get("properties") or {}
    param_bits = []
    for pname, spec in params.items():
        pdesc = spec.get("description", "") if isinstance(spec, dict) else ""
        param_bits.append(f"{split_identifier(pname)} {pdesc}".strip())
    parts = [
        split_identifier(card.key),
        card.description,
        card.when_to_use,
        " ".join(card.tags),
        "; ".join(param_bits),
    ]
    return ". ".join(p for p in parts if p)


# The parts of a card that per-field retrieval ranks on their own (`retrieval.w_bm25_fields`).
FIELDS = ("name", "description", "parameters")
_VARIANT = re.compile(r"~\d+$")


def search_fields(card: ToolCard) -> dict[str, str]:
    """`search_text` cut into its fields: name words, what it does, its parameters.

    name: the key split into words, without a `~2` variant suffix (`Catalog`'s
    rename of a duplicate, not a word of the name); description: description,
    usage note and tags; parameters: each parameter's name words and description.
    """
    params = card.parameters.get("properties") or {}
    bits = [f"{split_identifier(p)} {s.get('description', '') if isinstance(s, dict) else ''}".strip()
            for p, s in params.items()]
    return {"name": split_identifier(_VARIANT.sub("", card.key)),
            "description": ". ".join(p for p in (card.description, card.when_to_use, " ".join(card.tags)) if p),
            "parameters": "; ".join(bits)}


def split_identifier(name: str) -> str:
    """`getStockPrice` / `get_stock_price` / `finance.get-price` → words."""
    out, prev = [], ""
    for ch in name:
        if ch in "._-/:":
            out.append(" ")
        elif ch.isupper() and prev and (prev.islower() or prev.isdigit()):
            out.append(" " + ch.lower())
        else:
            out.append(ch.lower())
        prev = ch
    return " ".join("".join(out).split())
