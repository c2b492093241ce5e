"""What a caller's `tool_choice` and parallel-call setting ask of an answer, enforced for every model style.

    check_tool_choice(body)                  # the chat body's tool_choice / parallel_tool_calls: named 400s
    choice = ToolChoice.of(body)             # auto | none | required | named, and whether calls may be parallel
    shown = choice.offered(tools)            # what a prompt-style model is shown: none → nothing, a name → that tool
    kept, dropped = choice.keep(calls, name_of)   # the calls the caller may get, and why each other one went
    why = choice.unmet(kept, model)          # an answer that cannot be made to obey: a failed answer

A native model gets the API's own fields (`tool_choice`, `parallel_tool_calls`,
mapped per provider API in data/wire/); a prompt-style model sees
only the functions it may call in its system prompt, with a line saying which
call is required. Either way the answer is held to what was asked, since a
model may ignore it: a call under `none` is dropped (the text kept), calls past
the first when parallel calls are off are dropped, calls of other tools under a
named choice are dropped, and an answer left with no call under `required` or
a named choice is a failed answer (serving/gateway/cascade.py goes on to the
next model). What was dropped is said in the answer's `switchcraft.tool_choice`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from data.schema import Tool
from serving.core.errors import bad

T = TypeVar("T")


def check_tool_choice(body: dict[str, Any]) -> None:
    """`tool_choice` one of the forms OpenAI takes, a named tool one of the request's tools, `parallel_tool_calls`
    a boolean; GatewayError(400) naming the field."""
    if body.get("parallel_tool_calls") is not None and not isinstance(body["parallel_tool_calls"], bool):
        raise bad("must be true or false", "parallel_tool_calls")
    choice = body.get("tool_choice")
    if choice is None or choice in ("none", "auto", "required"):
        return
    fn = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad("must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": …}}",
                  "tool_choice")
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []  # not a list: to_tools says so
    names = [t["function"].get("name") for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if fn["name"] not in names:
        listed = ", ".join(repr(n) for n in names[:20]) or "none"
        raise bad(f"{fn['name'][:64]!r} is not one of the request's tools ({listed}); name a tool in `tools`",
                  "tool_choice.function.name")


@dataclass(frozen=True)
class ToolChoice:
    """What the caller asked of the answer's calls (a checked chat body's `tool_choice`, `parallel_tool_calls`)."""

    mode: str = "auto"  # auto | none | required | named
    name: str | None = None  # the tool a named choice requires
    parallel: bool = True  # more than one call per answer

    @classmethod
    def of(cls, body: dict[str, Any]) -> ToolChoice:
        choice, parallel = body.get("tool_choice"), body.get("parallel_tool_calls") is not False
        if not body.get("tools"):  # no tools: nothing to choose among, and nothing to call in parallel
            return cls()
        if isinstance(choice, dict):
            return cls("named", choice["function"]["name"], parallel)
        return cls(choice if choice in ("none", "required") else "auto", None, parallel)

    @property
    def constrained(self) -> bool:
        """Whether the answer must be checked (anything but auto with parallel calls allowed)."""
        return self.mode != "auto" or not self.parallel

    def to_dict(self) -> dict[str, Any]:
        return {"tool_choice": self.mode if self.mode != "named" else {"name": self.name},
                "parallel_tool_calls": self.parallel}

    def offered(self, tools: list[Tool]) -> list[Tool]:
        """The tools a prompt-style model is shown: none under `none`, only the named one under a named choice."""
        if self.mode == "none":
            return []
        if self.mode == "named":
            return [t for t in tools if t.name == self.name]
        return tools

    def instruction(self) -> str | None:
        """The line a prompt-style model's system prompt adds, for what its functions alone cannot say."""
        one = " Make exactly one function call." if not self.parallel else ""
        if self.mode == "named":
            return f"You MUST call the function {self.name}.{one}"
        if self.mode == "required":
            return f"You MUST call at least one of the functions.{one}"
        return one.strip() or None

    def keep(self, calls: list[T], name_of: Callable[[T], str]) -> tuple[list[T], list[dict[str, str]]]:
        """(the calls the caller may get, each other one as {name, why}), in the answer's order."""
        kept: list[T] = []
        dropped: list[dict[str, str]] = []
        for call in calls:
            name = name_of(call)
            if self.mode == "none":
                dropped.append({"name": name, "why": "tool_choice is none"})
            elif self.mode == "named" and name != self.name:
                dropped.append({"name": name, "why": f"tool_choice names {self.name}"})
            elif kept and not self.parallel:
                dropped.append({"name": name, "why": "parallel tool calls are off: the first call is kept"})
            else:
                kept.append(call)
        return kept, dropped

    def unmet(self, kept: list, model: str) -> str | None:
        """Why an answer with `kept` calls does not do what was asked (None when it does)."""
        if kept or self.mode not in ("required", "named"):
            return None
        if self.mode == "named":
            return f"{model} answered without calling the required tool {self.name!r}"
        return f"{model} answered without a tool call (tool_choice is required)"


AUTO = ToolChoice()
