"""Tool routing: which few tools the model sees (catalog → permission filter → groups → hybrid top-K).

    from serving.tools import Caller, Catalog, ToolIndex, ToolRouter
    catalog = Catalog.from_files(["cards.yaml"])
    router = ToolRouter(ToolIndex.build(catalog, "runs/tools/index"))
    decision = router.route("refund order 42", Caller(tenant="acme", roles=["support"]))
"""

from serving.tools.cards import GroupCard, ToolCard
from serving.tools.catalog import REQUEST_GROUP, Catalog
from serving.tools.config import ToolsConfig, load_tools_config
from serving.tools.index import ToolIndex
from serving.tools.policy import AccessPolicy, Caller
from serving.tools.router import CallCheck, RoutingDecision, ToolRouter

__all__ = [
    "AccessPolicy", "CallCheck", "Caller", "Catalog", "GroupCard", "REQUEST_GROUP", "RoutingDecision",
    "ToolCard", "ToolIndex", "ToolRouter", "ToolsConfig", "load_tools_config",
]
