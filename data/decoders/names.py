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


@lru_cache(maxsize=1024)
def _index(names: tuple[str, ...]) -> ToolNameIndex:
    return ToolNameIndex(names)


def tool_name_index(tools: list[Tool] | None) -> ToolNameIndex:
    """The index of the tools' names, cached by the names alone.

    Only names are kept (never the tools, whose schemas a caller controls: a cache that held them let any
    request's 100,000-item `enum` stay in memory), and at most 1,024 distinct name lists."""
    return _index(tuple(t.name for t in tools) if tools else ())


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
