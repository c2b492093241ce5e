"""The reservation counts everything a provider bills: `n` answers, image parts, the output cap that is sent.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_budget_estimates.py

Pure functions of serving/core/budget.py on the real pool file: no server.
"""

from __future__ import annotations

import pytest

from data.pool import load_pool
from data.wire import native_request
from data.pool_runner.request import cap_field, with_output_cap
from serving.core.budget import IMAGE_INPUT_TOKENS, call_worst_case_usd, output_cap
from tests.routers import REPO

POOL = load_pool(REPO / "configs" / "pool.yaml")
MODEL = next(m for m in POOL.models if m.prices.input_per_mtok and m.prices.output_per_mtok)
USER = {"role": "user", "content": "what is in the picture?"}


def worst(body: dict, payload_bytes: int = 400) -> float:
    return call_worst_case_usd(POOL, MODEL.name, body, payload_bytes, chars_per_token=4.0, default_output_tokens=1024)


def per_token(input_tokens: int, output_tokens: int) -> float:
    p = MODEL.prices
    return (input_tokens * p.input_per_mtok + output_tokens * max(p.output_per_mtok, p.reasoning_per_mtok or 0)) / 1e6


def test_n_answers_are_n_outputs():
    one = worst({"messages": [USER], "max_tokens": 500})
    assert one == pytest.approx(per_token(100, 500))
    assert worst({"messages": [USER], "max_tokens": 500, "n": 128}) == pytest.approx(per_token(100, 500 * 128))


@pytest.mark.parametrize("fields", [{"max_tokens": 4000, "max_completion_tokens": 100},
                                    {"max_tokens": 100, "max_completion_tokens": 4000}])
def test_the_smaller_of_the_two_max_token_fields_is_the_cap_and_the_only_one_sent(fields):
    assert output_cap(fields, MODEL, 1024) == 100
    sent = with_output_cap({"messages": [USER], **fields}, MODEL, 1024)
    assert {k: sent.get(k) for k in ("max_tokens", "max_completion_tokens") if k in sent} == {cap_field(MODEL): 100}


def test_an_uncapped_request_is_sent_the_cap_its_reservation_assumes():
    body = {"messages": [USER]}
    assert with_output_cap(body, MODEL, 1024)[cap_field(MODEL)] == output_cap(body, MODEL, 1024) == 1024
    pooled = MODEL.model_copy(update={"max_output_tokens": 300})
    assert with_output_cap(body, pooled, 1024)[cap_field(pooled)] == 300
    assert worst(body) == pytest.approx(per_token(100, 1024))


@pytest.mark.parametrize(("api", "field"), [("openai_chat", "max_tokens"), ("anthropic_messages", "max_tokens"),
                                            ("openai_responses", "max_output_tokens")])
def test_every_provider_api_gets_the_cap_in_its_own_field(api, field):
    model = MODEL.model_copy(update={"api": api})
    assert native_request(api, with_output_cap({"messages": [USER]}, model, 777))[field] == 777


@pytest.mark.parametrize(("model_id", "field"), [("o3-2025-04-16", "max_completion_tokens"),
                                                 ("o4-mini", "max_completion_tokens"),
                                                 ("gpt-5-mini-2025-08-07", "max_completion_tokens"),
                                                 ("gpt-4o-2024-08-06", "max_tokens"),
                                                 ("claude-3-haiku-20240307", "max_tokens"),
                                                 ("open-mistral-nemo", "max_tokens")])
def test_openai_reasoning_models_get_max_completion_tokens_and_every_other_chat_model_max_tokens(model_id, field):
    model = MODEL.model_copy(update={"model_id": model_id})
    assert cap_field(model) == field
    assert with_output_cap({"messages": [USER], "max_tokens": 50}, model, 1024) == {"messages": [USER], field: 50}


def test_each_image_part_is_reserved_at_what_a_provider_may_bill_for_it():
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "what?"}, image, image]}],
            "max_tokens": 10}
    assert worst(body) == pytest.approx(per_token(100 + 2 * IMAGE_INPUT_TOKENS, 10))


def test_flags_and_junk_are_not_counts():
    assert worst({"messages": [USER], "max_tokens": 10, "n": True}) == pytest.approx(per_token(100, 10))
    assert worst({"messages": "hi", "max_tokens": 10}) == pytest.approx(per_token(100, 10))
