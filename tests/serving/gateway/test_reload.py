"""Router reloads (serving/gateway/reload.py): the router replaced is drained, then closed when the slot loaded it,
and its memory given back; the router the gateway was built with belongs to its caller and stays usable."""

import asyncio

from serving.client import RouterClient
from serving.gateway.batcher import RoutingBatcher
from serving.core.metrics import GatewayMetrics
from serving.gateway.reload import RouterSlot, release_memory


def test_a_reload_closes_the_router_it_loaded_once_drained_never_the_callers(exported, bfcl_requests):
    onnx_dir = exported[0]
    first = RouterClient.from_dir(onnx_dir, backend="ort", threads=1)
    messages, tools = bfcl_requests[0]
    metrics = GatewayMetrics()

    async def reloads():
        slot = RouterSlot(first, lambda c, runner: RoutingBatcher(c, metrics, executor=runner), first.models, metrics,
                          load=lambda path: RouterClient.from_dir(path, backend="ort", threads=1))
        routed = asyncio.ensure_future(slot.batcher.route(messages, tools))  # admitted before the swap
        await slot.reload(str(onnx_dir))
        second = slot.client
        assert (await routed).decision.chosen in first.models  # the old router finished what it had admitted
        await slot.reload(str(onnx_dir))
        await slot.aclose()  # waits for the drains
        return slot, second

    slot, second = asyncio.run(reloads())
    assert second.backend.session is None  # loaded by the slot, replaced, drained: closed
    assert first.backend.session is not None  # the caller's: untouched
    assert first.route(messages, tools).decision.chosen in first.models
    assert slot.client.backend.session is not None
    release_memory()  # callable anywhere (a no-op trim where the C library has no malloc_trim)
