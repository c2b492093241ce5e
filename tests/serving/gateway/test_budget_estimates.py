"""The reservation counts everything a provider bills: `n` answers, image parts, the larger max-token field.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_budget_estimates.py

Pure functions of serving/gateway/budget.py on the real pool file: no server.
"""

from __future__ import annotations

import pytest

from data.pool import load_pool
from serving.gateway.budget import IMAGE_INPUT_TOKENS, call_worst_case_usd, output_cap
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


def test_the_larger_of_the_two_max_token_fields_is_the_cap(fields):
    assert output_cap(fields, MODEL, 1024) == 4000


def test_each_image_part_is_reserved_at_what_a_provider_may_bill_for_it():
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "what?"}, image, image]}],
            "max_tokens": 10}
    assert worst(body) == pytest.approx(per_token(100 + 2 * IMAGE_INPUT_TOKENS, 10))


def test_flags_and_junk_are_not_counts():
    assert worst({"messages": [USER], "max_tokens": 10, "n": True}) == pytest.approx(per_token(100, 10))
    assert worst({"messages": "hi", "max_tokens": 10}) == pytest.approx(per_token(100, 10))
