"""Map the function names models write back to the tool names in scope.

Native function-calling APIs forbid dots in names, so BFCL sent `math.factorial` as
`math_factorial` and the models answer with that; Gemini prefixes `default_api.`,
some OpenAI answers `functions.`. A decoded name is mapped only when exactly one tool
in scope matches it under these rewrites; otherwise it is kept as written (never a
"nearest" name: a wrong name must stay wrong).
"""

from __future__ import annotations

from functools import lru_cache

from data.schema import Call, Tool

_PREFIXES = ("functions.", "default_api.", "tools.", "functions_")


def _key(name: str) -> str:
    return name.replace(".", "_").replace("-", "_").replace("/", "_")


class ToolNameIndex:
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = frozenset(names)
        by_key: dict[str, set[str]] = {}
        for n in names:
            by_key.setdefault(_key(n), set()).add(n)
        # Ambiguous keys (two tools that differ only by '.' vs '_') map to nothing.
        self.by_key = {k: next(iter(v)) for k, v in by_key.items() if len(v) == 1}

    def resolve(self, name: str) -> str | None:
        """The tool `name` means, or None when no tool (or more than one) matches."""
        if name in self.names:
            return name
        for candidate in (name, *(name[len(p) :] for p in _PREFIXES if name.startswith(p))):
            if candidate in self.names:
                return candidate
            hit = self.by_key.get(_key(candidate))
            if hit is not None:
                return hit
        return None


@lru_cache(maxsize=4096)
def _index(names: tuple[str, ...]) -> ToolNameIndex:
    return ToolNameIndex(names)


_BY_ID: dict[int, tuple[list[Tool], ToolNameIndex]] = {}


def tool_name_index(tools: list[Tool] | None) -> ToolNameIndex:
    # Cached by the list's identity too: importers pass one Example.tools for all models.
    if tools is None:
        return _index(())
    hit = _BY_ID.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    index = _index(tuple(t.name for t in tools))
    if len(_BY_ID) > 8192:
        _BY_ID.clear()
    _BY_ID[id(tools)] = (tools, index)
    return index


def map_names(calls: list[Call], tools: list[Tool] | None) -> list[Call]:
    """Rename calls in place to the tools they unambiguously mean; returns `calls`."""
    if not tools:
        return calls
    index = tool_name_index(tools)
    for c in calls:
        if c.name not in index.names:
            hit = index.resolve(c.name)
            if hit is not None:
                c.name = hit
    return calls
