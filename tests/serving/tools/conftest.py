"""Fixtures of the tool-routing tests: the tiny catalog's index, built once a module with the session encoder."""

import pytest

from tests.catalogs import build_tiny_index


@pytest.fixture(scope="module")
def index(encoder, tmp_path_factory):
    return build_tiny_index(encoder, tmp_path_factory)
