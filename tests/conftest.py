"""Shared test fixtures: where the real shared data lives."""

from __future__ import annotations

import os
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
