"""The permission filter: one hand-written case per reason, in order."""

from serving.tools.cards import ToolCard
from serving.tools.policy import REASONS, AccessPolicy, Caller

POLICY = AccessPolicy(role_permissions={"support": ["pay.read"], "admin": ["pay.read", "pay.refund"]},
                      default_max_risk="write", role_max_risk={"admin": "irreversible"})


def reason(card, caller, policy=POLICY):
    result = policy.filter([card], caller)
    return None if result.visible[0] else result.hidden[0][1]


def test_each_reason():
    support = Caller(tenant="acme", roles=["support"], environment="prod")
    assert reason(ToolCard(name="t", risk="read", tenants=["other"]), support) == "tenant"
    assert reason(ToolCard(name="t", risk="read", roles=["admin"]), support) == "role"
    assert reason(ToolCard(name="t", risk="read", permissions=["pay.refund"]), support) == "permission"
    assert reason(ToolCard(name="t", risk="read", environments=["staging"]), support) == "environment"
    assert reason(ToolCard(name="t", risk="read", health="down"), support) == "health"
    assert reason(ToolCard(name="t", risk="irreversible"), support) == "risk"
    assert reason(ToolCard(name="t", risk="write", permissions=["pay.read"]), support) is None
    assert set(REASONS) == {"tenant", "role", "permission", "environment", "health", "risk"}


def test_roles_grant_permissions_and_risk():
    admin = Caller(tenant="acme", roles=["admin"])
    assert reason(ToolCard(name="t", risk="irreversible", permissions=["pay.refund"]), admin) is None
    direct = Caller(permissions=["pay.refund"])  # granted directly, but default risk stops irreversible
    assert reason(ToolCard(name="t", risk="irreversible", permissions=["pay.refund"]), direct) == "risk"
    assert reason(ToolCard(name="t", risk="write", permissions=["pay.refund"]), direct) is None


def test_degraded_hidden_only_when_asked():
    c = ToolCard(name="t", risk="read", health="degraded")
    assert reason(c, Caller()) is None
    assert reason(c, Caller(), AccessPolicy(hide_degraded=True)) == "health"


def test_first_failing_check_is_the_reason_and_counts():
    cards = [ToolCard(name="a", risk="irreversible", tenants=["x"]), ToolCard(name="b", risk="irreversible"),
             ToolCard(name="c", risk="read")]
    res = POLICY.filter(cards, Caller(tenant="acme"))
    assert res.visible.tolist() == [False, False, True]
    assert res.hidden == [("a", "tenant"), ("b", "risk")]
