"""The deterministic permission filter: which tools a caller may see, and why not the others.

It runs before any retrieval, so nothing downstream (BM25, embeddings, group
selection, pinned tools, `request_group` expansions) can ever reach a tool the
caller may not see. Checks, in order (the first failing one is the reason):
tenant, role, permission, environment, health, risk.

    from serving.tools.policy import AccessPolicy, Caller
    policy = AccessPolicy(role_permissions={"analyst": ["payments.read"]})
    seen = policy.filter(catalog, Caller(tenant="acme", roles=["analyst"], environment="prod"))
    seen.visible  # bool array over catalog.cards; seen.hidden: [(tool, reason)]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from serving.tools.cards import RISK_ORDER, Risk, ToolCard

REASONS = ("tenant", "role", "permission", "environment", "health", "risk")


class Caller(BaseModel):
    """Who is asking: the filter decides from these fields only (never from the query)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = ""
    roles: tuple[str, ...] = ()
    permissions: tuple[str, ...] = ()  # granted directly, on top of the roles' permissions
    environment: str = "prod"

    @field_validator("roles", "permissions", mode="before")
    @classmethod
    def _sorted(cls, v):
        if isinstance(v, str):  # a string is not a list of one name: "support" would be read as its letters
            raise ValueError(f"must be a list of names, not the string {v[:40]!r}; write [{v[:40]}]")
        return tuple(sorted(set(v or ())))


class AccessPolicy(BaseModel):
    """Roles → permissions and the risk each role may take."""

    model_config = ConfigDict(extra="forbid")

    role_permissions: dict[str, list[str]] = Field(default_factory=dict)
    # The highest risk a caller may see: the highest over its roles, else the default.
    default_max_risk: Risk = "write"
    role_max_risk: dict[str, Risk] = Field(default_factory=dict)
    hide_degraded: bool = False

    def granted(self, caller: Caller) -> set[str]:
        out = set(caller.permissions)
        for r in caller.roles:
            out.update(self.role_permissions.get(r, ()))
        return out

    def max_risk(self, caller: Caller) -> str:
        levels = [self.role_max_risk[r] for r in caller.roles if r in self.role_max_risk]
        return max(levels, key=RISK_ORDER.__getitem__) if levels else self.default_max_risk

    def reason_hidden(self, card: ToolCard, caller: Caller, granted: set[str], max_risk: str) -> str | None:
        """Why `caller` may not see `card`, or None when it may."""
        if card.tenants and caller.tenant not in card.tenants:
            return "tenant"
        if card.roles and not set(card.roles) & set(caller.roles):
            return "role"
        if any(p not in granted for p in card.permissions):
            return "permission"
        if card.environments and caller.environment not in card.environments:
            return "environment"
        if card.health == "down" or (self.hide_degraded and card.health == "degraded"):
            return "health"
        if RISK_ORDER[card.risk] > RISK_ORDER[max_risk]:
            return "risk"
        return None

    def filter(self, cards: list[ToolCard], caller: Caller) -> FilterResult:
        granted, max_risk = self.granted(caller), self.max_risk(caller)
        visible = np.zeros(len(cards), dtype=bool)
        hidden = []
        for i, c in enumerate(cards):
            why = self.reason_hidden(c, caller, granted, max_risk)
            if why is None:
                visible[i] = True
            else:
                hidden.append((c.key, why))
        return FilterResult(visible=visible, hidden=hidden)


@dataclass
class FilterResult:
    visible: np.ndarray  # bool, one per catalog card
    hidden: list[tuple[str, str]] = field(default_factory=list)  # (tool key, reason)

    def hidden_records(self) -> list[dict[str, str]]:
        """[{tool, reason}], built once per caller: a decision copies the list, not 1,000 dicts."""
        if not hasattr(self, "_records"):
            self._records = [{"tool": t, "reason": r} for t, r in self.hidden]
        return list(self._records)
