"""The wire-API registry: the APIs it lists, the errors for an unknown or a repeated name, and the pool file's `api:`
checked against it.

    .venv/bin/python -m pytest -q tests/data/wire/test_registry.py

A new API registered by a test and used end to end (pool runner, replay server, gateway upstream and inbound):
tests/serving/gateway/test_wire_registry.py.
"""

from __future__ import annotations

import pytest

from data import wire
from data.errors import DataError
from data.pool import load_pool
from data.registry import UnknownNameError
from data.wire import registry

BUILT_IN = {"anthropic_messages": "/messages", "openai_chat": "/chat/completions", "openai_responses": "/responses"}


def test_the_registry_lists_every_built_in_api_with_its_path():
    assert set(BUILT_IN) <= set(registry.names())
    assert registry.names() == sorted(registry.names())
    for name, path in BUILT_IN.items():
        api = registry.get(name)
        assert api.name == name and api.path == path
        assert wire.url("http://h/v1/", name) == "http://h/v1" + path
    # Chat Completions' stream is chat chunks already (passed through); the others decode theirs.
    assert registry.get("openai_chat").stream is None
    assert registry.get("anthropic_messages").stream is not None and registry.get("openai_responses").events


def test_an_unknown_name_lists_the_known_ones_and_a_taken_name_is_refused():
    with pytest.raises(UnknownNameError, match="unknown wire API 'gopher'; known: anthropic_messages, openai_chat, "
                                               "openai_responses"):
        wire.native_request("gopher", {})
    with pytest.raises(ValueError, match="wire API 'openai_chat' is already registered"):
        registry.register(registry.get("openai_chat"))


def test_each_api_carries_its_key_where_it_expects_it():
    assert wire.auth_headers("openai_chat", "k") == {"authorization": "Bearer k"}
    assert wire.auth_headers("openai_responses", None) == {}
    assert wire.auth_headers("anthropic_messages", "k") == {"anthropic-version": "2023-06-01", "x-api-key": "k"}


def test_the_pool_file_names_a_registered_api_or_is_refused_with_file_line_and_the_known_names(tmp_path):
    f = tmp_path / "pool.yaml"
    f.write_text("models:\n  - name: a\n    prices: {usd_per_query: 1}\n  - name: b\n    api: gopher\n"
                 "    prices: {usd_per_query: 1}\n")
    with pytest.raises(DataError) as e:
        load_pool(f)
    message = str(e.value)
    assert "pool.yaml:5" in message and "models.1.api" in message and "'gopher'" in message
    assert "anthropic_messages, openai_chat, openai_responses" in message and "POST /messages" in message
    f.write_text("models:\n  - name: a\n    api: openai_responses\n    prices: {usd_per_query: 1}\n")
    assert load_pool(f).models[0].api == "openai_responses"
