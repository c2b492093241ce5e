"""Tool cards from files: card YAML/JSON, OpenAI tool lists, MCP `tools/list`, BFCL function docs.

The format is recognised per entry, so one file may mix them:

- a card: a mapping with card fields (`namespace`, `risk`, `permissions`, …);
- OpenAI: `{"type": "function", "function": {name, description, parameters}}`;
- MCP: `{name, description, inputSchema, annotations?}` (a `tools/list` result,
  bare or inside a JSON-RPC response `{"result": {"tools": [...]}}`);
- BFCL: `{name, description, parameters}` with BFCL's type names, a question
  row carrying `function`, or a `thousand_tools` row `{hash, function}`.

A file is a list of entries, or a mapping with `tools:` (and optionally
`groups:`, a list of `{name, description}`). `.jsonl` files hold one entry a
line. A dotted function name (`math.factorial`) gives the namespace `math`
when none is given; the model still sees the name the source used.

    from serving.tools.loaders import load_cards
    cards, groups = load_cards("configs/tool_cards/payments.yaml")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from data.errors import DataError
from data.tools import normalize_schema
from serving.tools.cards import GroupCard, ToolCard

CARD_ONLY_FIELDS = {
    "namespace", "when_to_use", "when_not_to_use", "tags", "permissions", "roles", "tenants",
    "environments", "risk", "health", "version", "cost", "group", "call_name",
}


def load_cards(
    path: str | Path, *, default_risk: str | None = None, namespace: str | None = None
) -> tuple[list[ToolCard], list[GroupCard]]:
    """Cards and groups from one file. `default_risk` fills cards that do not say
    (function docs never do); `namespace` fills cards that have none."""
    path = Path(path)
    if not path.exists():
        raise DataError("no such file", path=path, hint="give a card YAML/JSON, an OpenAI tool list, MCP tools/list JSON or BFCL docs")
    entries, lines, groups_raw = _read_entries(path)
    cards = []
    for i, entry in enumerate(entries):
        where = {"path": path, "line": lines[i] if lines else None}
        if not isinstance(entry, dict):
            raise DataError(f"entry {i}: expected a mapping, got {type(entry).__name__}", **where, field=f"tools[{i}]")
        try:
            card = card_from_entry(entry, default_risk=default_risk)
        except (ValidationError, ValueError, KeyError) as e:
            raise DataError(f"entry {i}: {_short(e)}", **where, field=f"tools[{i}]",
                            hint="see docs/tool_routing.md for the card fields") from None
        if namespace and not card.namespace:
            card = card.model_copy(update={"namespace": namespace})
        cards.append(card)
    groups = []
    for i, g in enumerate(groups_raw or []):
        try:
            groups.append(GroupCard.model_validate(g))
        except ValidationError as e:
            raise DataError(_short(e), path=path, field=f"groups[{i}]") from None
    return cards, groups


def card_from_entry(entry: dict[str, Any], *, default_risk: str | None = None) -> ToolCard:
    """One card from one entry of any supported format."""
    if entry.get("type") == "function" and isinstance(entry.get("function"), dict):
        return _from_function_doc(entry["function"], default_risk)
    if "inputSchema" in entry:
        return _from_mcp(entry, default_risk)
    if isinstance(entry.get("function"), dict) and "name" not in entry:  # thousand_tools row
        return _from_function_doc(entry["function"], default_risk)
    if isinstance(entry.get("function"), list) and "question" in entry:
        raise ValueError("a BFCL question row holds several docs; use load_bfcl_question_docs")
    if CARD_ONLY_FIELDS & entry.keys():
        data = dict(entry)
        if "parameters" in data:
            data["parameters"] = _object_schema(data["parameters"])
        if default_risk and "risk" not in data:
            data["risk"] = default_risk
        return ToolCard.model_validate(data)
    return _from_function_doc(entry, default_risk)


def _from_function_doc(fn: dict[str, Any], default_risk: str | None) -> ToolCard:
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("function doc has no 'name'")
    ns, _, short = name.rpartition(".")
    return ToolCard(
        name=short,
        namespace=ns,
        call_name=name if ns else "",
        description=str(fn.get("description") or ""),
        parameters=_object_schema(fn.get("parameters")),
        risk=default_risk or "write",
    )


def _from_mcp(entry: dict[str, Any], default_risk: str | None) -> ToolCard:
    ann = entry.get("annotations") or {}
    if ann.get("readOnlyHint") is True:
        risk = "read"
    elif ann:
        # MCP: destructiveHint defaults to true for tools that are not read-only.
        risk = "write" if ann.get("destructiveHint") is False else "irreversible"
    else:
        risk = default_risk or "write"
    return ToolCard(
        name=entry["name"],
        description=str(entry.get("description") or ann.get("title") or ""),
        parameters=_object_schema(entry.get("inputSchema")),
        risk=risk,
    )


def _object_schema(params: Any) -> dict[str, Any]:
    if params is None:
        return {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise ValueError(f"parameters must be a mapping, got {type(params).__name__}")
    if "properties" not in params and "type" not in params:  # xLAM/Seal style {p: {type, description}}
        params = {"type": "object", "properties": params}
    out = normalize_schema(params)
    out.setdefault("type", "object")
    return out


def _read_entries(path: Path) -> tuple[list[Any], list[int] | None, list[Any] | None]:
    """(entries, their 1-based lines when known, groups)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        entries, lines = [], []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"invalid JSON: {e.msg}", path=path, line=n) from None
                lines.append(n)
        return entries, lines, None
    if path.suffix in (".yaml", ".yml"):
        try:
            doc = yaml.safe_load(text)
            node = yaml.compose(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise DataError(f"invalid YAML: {getattr(e, 'problem', e)}", path=path, line=mark.line + 1 if mark else None) from None
        entries, groups = _unwrap(doc, path)
        return entries, _yaml_entry_lines(node), groups
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
    entries, groups = _unwrap(doc, path)
    return entries, None, groups


def _unwrap(doc: Any, path: Path) -> tuple[list[Any], list[Any] | None]:
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict):  # JSON-RPC response
        doc = doc["result"]
    if isinstance(doc, list):
        return doc, None
    if isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        return doc["tools"], doc.get("groups")
    raise DataError("expected a list of tools or a mapping with a 'tools' list", path=path, field="tools")


def _yaml_entry_lines(node: Any) -> list[int] | None:
    if isinstance(node, yaml.SequenceNode):
        return [n.start_mark.line + 1 for n in node.value]
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == "tools" and isinstance(v, yaml.SequenceNode):
                return [n.start_mark.line + 1 for n in v.value]
    return None


def _short(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '<entry>'}: {err['msg']}" for err in e.errors())
    return str(e)
