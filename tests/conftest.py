"""Shared test fixtures: where the real shared data lives; every BFCL v1 example, the default pool and its recorded
answers, read once a session; a tiny router and its ONNX export, built once a session; the real MiniLM encoder and
a tiny card catalog (tool routing: serving, evaluation and CLI tests). Fixtures that build something the tests only
read are session-scoped here; servers with state a test changes are module-scoped where they are used."""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests explore new random examples on every local run (that is how they find
# bugs); under CI they replay a fixed, derandomised set so a landing never hinges on luck.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("SWITCHCRAFT_DATA_ROOT", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real data not found at {SHARED_DATA}; set SWITCHCRAFT_DATA_ROOT")
    return SHARED_DATA


@pytest.fixture(scope="session")
def bfcl_requests(shared_data) -> list:
    from tests.routers import bfcl_sample

    return [(e.messages, e.tools) for e in bfcl_sample(shared_data)]


@pytest.fixture(scope="session")
def bfcl_examples(shared_data) -> list:
    """Every BFCL v1 example, read once for the session (tests only read them)."""
    from data.sources import read_source

    return read_source("bfcl_v1", str(shared_data / "bfcl_v1"))


@pytest.fixture(scope="session")
def recordings_dir(shared_data) -> Path:
    return shared_data / "bfcl_v1_pool_outputs_2024-08-11"


@pytest.fixture(scope="session")
def default_pool():
    from data.pool import load_pool

    return load_pool(REPO / "configs" / "pool.yaml")


@pytest.fixture(scope="session")
def pool_recordings(recordings_dir, default_pool):
    """The default pool's recordings, read once for the session (the servers only read them)."""
    from data.replay.recordings import read_recordings

    return read_recordings(recordings_dir, models=[m.recording for m in default_pool.models])


@pytest.fixture(scope="session")
def tiny_router_dir(tmp_path_factory, shared_data) -> Path:
    from tests.routers import bfcl_sample, build_tiny_router

    return build_tiny_router(tmp_path_factory.mktemp("router") / "router", bfcl_sample(shared_data, 40))


@pytest.fixture(scope="session")
def exported(tmp_path_factory, tiny_router_dir, bfcl_requests):
    """(onnx dir, ExportReport): fp32 + INT8, validated on real packed BFCL requests."""
    from tests.routers import decide_with
    from training.export import export_router

    info = json.loads((tiny_router_dir / "router.json").read_text())
    out = tmp_path_factory.mktemp("onnx") / "router_onnx"
    report = export_router(tiny_router_dir, out, requests=bfcl_requests, int8=True, decide=decide_with(info), threads=1)
    return out, report


@pytest.fixture(scope="session")
def encoder():
    from serving.tools.encoder import MiniLMEncoder

    return MiniLMEncoder.load()


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on loopback for the session (evaluation/harness.py LocalPostgres: a throwaway
    cluster); the tests that need it are skipped, saying why, where its binaries are not installed."""
    from evaluation.harness import LocalPostgres, postgres_missing

    if (why := postgres_missing()) is not None:
        pytest.skip(why)
    server = LocalPostgres()
    server.start()
    yield server
    server.stop()


_DATABASES = itertools.count()


@pytest.fixture()
def pg_log(postgres, request) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL server: a decision log of the test's own."""
    return postgres.create_database(f"t{next(_DATABASES)}_" + re.sub(r"\W+", "_", request.node.name)[:40].lower())


@pytest.fixture()
def cards_file(tmp_path):
    from tests.catalogs import CARDS_YAML

    p = tmp_path / "cards.yaml"
    p.write_text(CARDS_YAML)
    return p


def _cuda_available() -> bool:
    try:
        import onnxruntime as ort

        return "CUDAExecutionProvider" in ort.get_available_providers()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run where ONNX Runtime sees a CUDA device (onnxruntime-gpu), and are skipped, saying so,
    everywhere else (this project's CI and development machines have none)."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device for ONNX Runtime (onnxruntime-gpu); none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
