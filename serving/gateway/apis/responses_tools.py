"""The tools of a Responses request as the gateway offers them, and back: namespaces flattened, freeform (custom)
tools as functions of one string, hosted tools left out and named (serving/gateway/apis/openai_responses.py says
what each becomes).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from serving.gateway.apis import check_keys, string
from serving.core.errors import bad

SEPARATOR = "__"  # <namespace>__<name>: the flat name a namespaced tool is offered under
MAX_NAME = 64  # a function name's length at most (Chat Completions and Responses alike)


class Tools:
    """The request's tools as chat function tools: namespaces flattened, custom tools as one-string functions,
    hosted tools dropped (`dropped`); `calls` maps a flat name back to (namespace, name, custom?)."""

    def __init__(self) -> None:
        self.offered: list[dict] = []
        self.paths: list[str] = []  # per offered tool, where the caller declared it
        self.dropped: list[dict[str, str]] = []
        self.calls: dict[str, tuple[str | None, str, bool]] = {}

    @classmethod
    def of(cls, body: dict[str, Any]) -> Tools:
        out = cls()
        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                raise bad("must be a list of tools {type: function, name, parameters}", "tools")
            for i, t in enumerate(tools):
                out.add(t, f"tools[{i}]")
        items = body.get("input")
        for i, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, dict) and item.get("type") == "additional_tools":
                extra = item.get("tools")
                if not isinstance(extra, list):
                    raise bad("must be a list of tools", f"input[{i}].tools")
                for j, t in enumerate(extra):
                    out.add(t, f"input[{i}].tools[{j}]")
        return out

    def add(self, t: Any, at: str, namespace: str | None = None) -> None:
        kind = check_keys(t, at).get("type")
        if kind == "namespace" and namespace is None:
            ns = string(t.get("name"), f"{at}.name")
            inner = t.get("tools")
            if not isinstance(inner, list):
                raise bad("must be a list of function or custom tools", f"{at}.tools")
            for j, tool in enumerate(inner):
                self.add(tool, f"{at}.tools[{j}]", ns)
            return
        if kind not in ("function", "custom"):
            self.dropped.append({"tool": str(t.get("name") or kind)[:80], "type": str(kind)[:40],
                                 "why": "a hosted tool; the pool's models are offered function tools only"})
            return
        name = string(t.get("name"), f"{at}.name")
        flat = self.flat(name, namespace)
        self.calls[flat] = (namespace, name, kind == "custom")
        fn = {k: t[k] for k in ("description", "parameters", "strict") if t.get(k) is not None}
        if kind == "custom":
            fn = custom_function(t)
        self.offered.append({"type": "function", "function": {"name": flat, **fn}})
        self.paths.append(at)

    @staticmethod
    def flat(name: str, namespace: str | None) -> str:
        """`<namespace>__<name>`; past the 64 characters a function name may have, cut and told apart by a
        hash (the answer's calls are mapped back by `calls`, so any unique name will do)."""
        if not namespace:
            return name
        flat = f"{namespace}{SEPARATOR}{name}"
        if len(flat) <= MAX_NAME:
            return flat
        return f"{flat[:MAX_NAME - 9]}_{hashlib.sha256(flat.encode()).hexdigest()[:8]}"

    def output(self, items: list[dict]) -> list[dict]:
        """The answer's function_call items under the caller's names: namespace apart, custom calls as
        custom_tool_call with their `input`."""
        out = []
        for item in items:
            ns, name, custom = self.calls.get(item.get("name"), (None, item.get("name"), False))
            if item.get("type") == "function_call" and custom:
                item = {"type": "custom_tool_call", "id": "ctc" + item["id"][2:], "call_id": item["call_id"],
                        "name": name, "input": custom_input(item["arguments"]), "status": item["status"]}
            elif item.get("type") == "function_call":
                item = {**item, "name": name}
            if ns is not None:
                item["namespace"] = ns
            out.append(item)
        return out


def custom_function(t: dict) -> dict:
    """A freeform tool as a function of one string: its format (a grammar) told in the description."""
    description = t.get("description") or ""
    fmt = t.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        description += (f"\n\nThe input follows this {fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')}")
    return {"description": description, "parameters": {
        "type": "object", "properties": {"input": {"type": "string", "description": "The tool's free-text input."}},
        "required": ["input"], "additionalProperties": False}}


def custom_input(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value["input"] if isinstance(value, dict) and isinstance(value.get("input"), str) else arguments
