"""Tool routing in the gateway: the catalog's tool router runs before the model router.

    tools = GatewayTools.from_settings(cfg.tools)              # or GatewayTools(ToolRouter(...))
    routed = tools.route(messages, caller_field)               # ToolRouted: OpenAI tools + the trace

The catalog (configured, server side) is the only source of exposed tools: a
request's own `tools` are replaced by the routed set before packing, costing
and forwarding, so a caller cannot bypass the permission filter by sending a
catalog tool's definition itself. The query is the last user message; the
caller (tenant, roles, permissions, environment) is the request's API key's
identity, narrowed by the request's `caller` (serving/core/auth.py; a
string is a tenant); `request_group` calls already in the conversation are
replayed as expansions, through the same filter. With `tools.mcp` (an MCP
gateway config) the catalog is its upstream MCP servers' tools, under the MCP
config's policy and retrieval (the tools config gives only `groups`), so chat
callers and MCP hosts see the same tools and groups; serving/app.py builds that
one, so the gateway never imports the MCP gateway.

A model's call to a tool it was not shown (a hallucinated name, a tool from
the conversation's history the caller may no longer see) never reaches the
caller by default: `tools.rejected_calls` drops it (`drop`), withholds the
whole answer's calls (`refuse`), or passes it on, flagged (`pass`). Every API's
answer is translated from the chat answer this edits, so all three get it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data.schema import Message, Tool
from serving.core.auth import forbidden
from serving.gateway.config import ToolRoutingSettings
from serving.tools.cards import RISK_ORDER
from serving.tools.catalog import REQUEST_GROUP
from serving.tools.policy import Caller
from serving.tools.router import RoutingDecision, ToolRouter

MAX_TOOLS = ToolRoutingSettings.model_fields["max_tools"].default  # the defaults of `tools.max_tools`
REJECTED = ToolRoutingSettings.model_fields["rejected_calls"].default  # and `tools.rejected_calls`
WITHHELD = ("[switchcraft] The model called tools this caller may not use; {n} tool call(s) were withheld "
            "(tools.rejected_calls). Ask again, or name the task differently.")


@dataclass
class ToolRouted:
    decision: RoutingDecision
    tools: list[Tool]  # what the model router packs: the reduced set, request_group included
    openai: list[dict[str, Any]]  # what goes upstream in `tools`

    def trace(self) -> dict[str, Any]:
        d = self.decision
        return {"exposed": d.exposed_names, "tool_keys": d.tool_keys, "groups": d.groups, "confidence": d.confidence,
                "mode": d.mode, "asks": len(d.intents) or 1, "expansions": [{"group": e.group, "accepted": e.accepted, "added": e.added,
                                                 "reason": e.reason} for e in d.expansions],
                "catalog_version": d.catalog_version, "n_hidden": len(d.hidden), "schema_tokens": d.schema_tokens,
                "timings_ms": d.timings_ms}


def query_of(messages: list[Message]) -> str:
    for m in reversed(messages):
        if m.role == "user" and m.content:
            return m.content
    return ""


class GatewayTools:
    def __init__(self, router: ToolRouter, *, max_tools: int = MAX_TOOLS, rejected: str = REJECTED) -> None:
        self.router, self.max_tools, self.rejected = router, max_tools, rejected

    @classmethod
    def from_settings(cls, settings: ToolRoutingSettings) -> GatewayTools:
        from serving.tools.config import load_tools_config

        if settings.mcp is not None:
            raise ValueError("tools.mcp: a catalog of MCP servers' tools is built by the serving app "
                             "(serving/app.py tools_of), not by the gateway alone")
        cfg = load_tools_config(settings.config)
        update: dict[str, Any] = {}
        if settings.catalog is not None:
            update["catalog"] = settings.catalog
        if settings.index_dir is not None:
            update["index_dir"] = settings.index_dir
        if settings.top_k is not None:
            update["retrieval"] = cfg.retrieval.model_copy(update={"top_k": settings.top_k})
        return cls(ToolRouter.from_config(cfg.model_copy(update=update)), max_tools=settings.max_tools,
                   rejected=settings.rejected_calls)

    @property
    def catalog_version(self) -> str:
        return self.router.catalog.version

    def check_narrowing(self, who: Caller, key: Caller, where: str) -> None:
        """403 when `who` (the key's identity narrowed by the body) may see riskier tools than the key: dropping
        roles can fall back to the policy's default risk, which may be above the key's roles' own."""
        policy = self.router.policy
        if RISK_ORDER[policy.max_risk(who)] > RISK_ORDER[policy.max_risk(key)]:
            raise forbidden("caller", f"these roles would raise the risk of the tools shown from "
                            f"{policy.max_risk(key)} to {policy.max_risk(who)}; keep a role that limits it",
                            f"{where}.roles")

    def rejected_calls(self, routed: ToolRouted, answer: dict[str, Any]) -> list[str]:
        """Tool calls in a model's answer naming a tool that was not exposed (never mapped to a near name)."""
        out = []
        for choice in answer.get("choices") or []:
            for tc in ((choice or {}).get("message") or {}).get("tool_calls") or []:
                name = ((tc or {}).get("function") or {}).get("name")
                if not isinstance(name, str) or not self.router.check_call(routed.decision, name).valid:
                    out.append(str(name))
        return out

    def withhold(self, routed: ToolRouted, answer: dict[str, Any]) -> dict[str, Any]:
        """`answer` as the caller gets it under `tools.rejected_calls` (`self.rejected`): `pass` unchanged; `drop`
        without the calls naming a tool that was not exposed; `refuse` without any call once one is rejected. A
        message left with neither a call nor text says so in its content (finish_reason `stop`), so an agent
        reads why and goes on; the tools' names are not repeated to the caller."""
        if self.rejected == "pass":
            return answer
        choices = []
        for choice in answer.get("choices") or []:
            message = (choice or {}).get("message") or {}
            calls = message.get("tool_calls") or []
            kept = [tc for tc in calls if self.router.check_call(
                routed.decision, str(((tc or {}).get("function") or {}).get("name"))).valid]
            if len(kept) == len(calls):
                choices.append(choice)
                continue
            kept = kept if self.rejected == "drop" else []
            message = {**message, "tool_calls": kept or None}
            choice = {**choice, "message": message}
            if not kept:
                message.pop("tool_calls")
                choice["finish_reason"] = "stop"
                if not (isinstance(message.get("content"), str) and message["content"].strip()):
                    message["content"] = WITHHELD.format(n=len(calls))
            choices.append(choice)
        return {**answer, "choices": choices}

    def route(self, messages: list[Message], caller: Caller) -> ToolRouted:
        decision = self.router.route(query_of(messages), caller)
        asked: list[str] = []
        for m in messages:  # the agent asked for a group earlier in this conversation: the way back
            for call in m.tool_calls:
                group = call.arguments.get("group")
                if call.name == REQUEST_GROUP and isinstance(group, str) and group not in asked:
                    asked.append(group)
                    self.router.expand(decision, group, caller)
        # Catalog tools are trusted definitions (validated cards): bound as they are, not re-checked as input.
        tools = [Tool(name=t["function"]["name"], description=t["function"].get("description", ""),
                      parameters=t["function"].get("parameters") or {"type": "object", "properties": {}},
                      original=t["function"]) for t in decision.tools]
        return ToolRouted(decision, tools, decision.tools)
