"""A real tritonserver (nvidia-pytriton's bundled binary) on loopback, serving the CPU repository variant.

    .venv/bin/python -m pytest tests/integration/test_triton.py -q

The server starts once for the module; decisions through Triton over HTTP and gRPC
must equal the in-process ONNX Runtime ones on real packed BFCL v1 requests,
also with concurrent requests of different lengths and through the gateway's micro-batcher.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from serving.client import RouterClient
from serving.triton import TritonServer, write_model_repository

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def repository(exported, tmp_path_factory):  # noqa: F811
    return write_model_repository(exported[0], tmp_path_factory.mktemp("triton") / "model_repository", threads=1)


@pytest.fixture(scope="module")
def server(repository):
    with TritonServer(repository / "cpu", startup_timeout_s=90) as srv:
        yield srv


@pytest.fixture(scope="module")
def in_process(exported):  # noqa: F811
    return RouterClient.from_dir(exported[0], threads=1)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_decisions_through_triton_equal_in_process(protocol, server, repository, in_process, bfcl_requests):  # noqa: F811
    url = server.http_url if protocol == "http" else server.grpc_url
    client = RouterClient.from_dir(repository, backend=f"triton-{protocol}", url=url, timeout_s=10)
    try:
        assert client.ready()
        assert client.version == in_process.version  # the same router.json beside the repository
        for messages, tools in bfcl_requests:
            remote, local = client.route(messages, tools), in_process.route(messages, tools)
            assert remote.decision.chosen == local.decision.chosen
            assert remote.decision.ranking == local.decision.ranking
            p_remote = np.array(list(remote.decision.probabilities.values()))
            p_local = np.array(list(local.decision.probabilities.values()))
            assert np.abs(p_remote - p_local).max() < 1e-5
            assert remote.backend == f"triton-{protocol}"
        # Client-side batching: one call of 16 mixed-length requests.
        together = client.probabilities(bfcl_requests)
        assert np.abs(together - in_process.probabilities(bfcl_requests)).max() < 1e-5
    finally:
        client.close()


def test_concurrent_requests_of_different_lengths_stay_exact(server, repository, in_process, bfcl_requests):  # noqa: F811
    client = RouterClient.from_dir(repository, backend="triton-grpc", url=server.grpc_url, timeout_s=10)
    try:
        with ThreadPoolExecutor(8) as pool:  # 8 in flight at once, of different lengths
            remote = list(pool.map(lambda r: client.probabilities([r])[0], bfcl_requests * 2))
        local = in_process.probabilities(bfcl_requests * 2)
        assert np.abs(np.stack(remote) - local).max() < 1e-5
    finally:
        client.close()
    http = RouterClient.from_dir(repository, backend="triton-http", url=server.http_url, timeout_s=10)
    with ThreadPoolExecutor(4) as pool:  # the HTTP client is per thread: no shared connection state
        chosen = list(pool.map(lambda r: http.route(*r).decision.chosen, bfcl_requests))
    assert chosen == [in_process.route(*r).decision.chosen for r in bfcl_requests]
    http.close()


def test_server_that_cannot_load_says_why(tmp_path, repository):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(repository / "cpu", broken)
    (broken / "router" / "1" / "model.onnx").write_bytes(b"not an onnx graph")
    with pytest.raises((RuntimeError, TimeoutError), match="router"):
        TritonServer(broken, startup_timeout_s=30).start()


def test_gateway_batcher_through_triton_equals_single_in_process_calls(server, repository, in_process, bfcl_requests):  # noqa: F811
    """The gateway's micro-batcher sends one ragged batch to Triton's Python backend: every decision as if alone."""
    import asyncio

    from serving.gateway.batcher import RoutingBatcher
    from serving.core.metrics import GatewayMetrics
    from serving.policy import Constraints

    client = RouterClient.from_dir(repository, backend="triton-grpc", url=server.grpc_url, timeout_s=10)
    asks = [(None, None), (Constraints(min_probability=0.4), None), (None, 0.9)]
    calls = [(r, c, t) for r in bfcl_requests for c, t in asks]
    batcher = RoutingBatcher(client, GatewayMetrics(), max_batch_size=len(calls), delay_s=60, max_queue=len(calls))

    async def all_at_once():
        try:
            return await asyncio.gather(*(batcher.route(m, t, c, threshold=th) for (m, t), c, th in calls))
        finally:
            await batcher.aclose()

    try:
        together = asyncio.run(all_at_once())
    finally:
        client.close()
    for routed, ((messages, tools), c, th) in zip(together, calls):
        alone = in_process.route(messages, tools, c, threshold=th).decision
        assert (routed.decision.chosen, routed.decision.ranking, routed.decision.rule) == (alone.chosen, alone.ranking, alone.rule)
        p_batched = np.array(list(routed.decision.probabilities.values()))
        assert np.abs(p_batched - np.array(list(alone.probabilities.values()))).max() < 1e-5
        assert routed.backend == "triton-grpc"


@pytest.mark.gpu
def test_the_gpu_variants_graph_on_cuda_equals_the_cpu_variant(repository, exported, bfcl_requests):  # noqa: F811
    """What the GPU repository variant serves (its model.onnx on ONNX Runtime's CUDA provider, as Triton's
    onnxruntime backend runs it) decides as the CPU variant does, on real packed BFCL v1 requests."""
    from training.export import RequestEncoder, ort_session

    enc = RequestEncoder.from_dir(exported[0])
    cuda = ort_session(repository / "gpu" / "router" / "1" / "model.onnx", providers=["CUDAExecutionProvider"])
    assert cuda.get_providers()[0] == "CUDAExecutionProvider"
    cpu = ort_session(repository / "cpu" / "router" / "1" / "model.onnx", threads=1,
                      providers=["CPUExecutionProvider"])
    batch = enc.batch(bfcl_requests)
    p_cuda, p_cpu = (s.run(["probabilities"], batch)[0] for s in (cuda, cpu))
    assert np.abs(p_cuda - p_cpu).max() <= 1e-3
    assert (p_cuda.argmax(1) == p_cpu.argmax(1)).all()
