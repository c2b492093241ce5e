"""Shared fixtures of the serving tests: a real Redis (gateway state)."""

import pytest


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real redis-server on loopback (the binary the test extra installs; serving/gateway/redis_local.py)."""
    from serving.gateway.redis_local import LocalRedis

    server = LocalRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()
