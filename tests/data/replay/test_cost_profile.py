"""Cost profiles: exact values on tiny recordings, and the real table for all 51 priced BFCL v1 models.

.venv/bin/python -m pytest -q tests/data/replay/test_cost_profile.py
"""

from __future__ import annotations

import csv

import pytest

from data.replay.cost_profile import markdown_table, profile_costs, read_usages, usages_of, write_profile
from data.pool import Prices, load_price_table
from data.replay.recordings import Recording, read_recordings
from data.schema import Usage


def _rec(i, o, r=None):
    return Recording("x", Usage(input_tokens=i, output_tokens=o, reasoning_tokens=r))


def test_profile_values(tmp_path):
    prices = {
        "terse": Prices(input_per_mtok=10, output_per_mtok=30),
        "chatty": Prices(input_per_mtok=1, output_per_mtok=3),
        "unrecorded": Prices(input_per_mtok=5, output_per_mtok=5),
    }
    recs = {
        "terse": {"a": _rec(100, 10), "b": _rec(300, 30)},
        "chatty": {
            "a": _rec(100, 1000, 800),
            "b": _rec(100, 3000, 2400),
            "c": Recording("x", Usage()),
        },
    }
    rows, ref = profile_costs(usages_of(recs), prices)
    assert ref == Usage(input_tokens=100, output_tokens=515)  # medians over the 4 known usages
    by = {r.model: r for r in rows}
    t, c = by["terse"], by["chatty"]
    assert t.real_usd_per_query == pytest.approx(
        (100 * 10 + 10 * 30 + 300 * 10 + 30 * 30) / 2 / 1e6
    )
    assert (
        c.queries == 2 and c.mean_output_tokens == 2000 and c.reasoning_share == pytest.approx(0.8)
    )
    assert c.real_usd_per_query == pytest.approx((100 * 1 + 2000 * 3) / 1e6)
    assert c.list_usd_per_query == pytest.approx((100 * 1 + 515 * 3) / 1e6)
    assert t.reasoning_share is None and by["unrecorded"].queries == 0
    assert [r.model for r in rows] == [
        "chatty",
        "terse",
        "unrecorded",
    ]  # by real cost, unrecorded last
    paths = write_profile(rows, ref, tmp_path)
    assert paths["png"].stat().st_size > 10_000
    assert "| 1 | chatty |" in paths["md"].read_text()
    assert len(list(csv.DictReader(paths["csv"].open()))) == 3


@pytest.mark.slow
def test_real_profile_of_51_priced_models(shared_data, tmp_path):
    prices = load_price_table(shared_data / "bfcl_v1_prices_2024-08.json")
    root = shared_data / "bfcl_v1_pool_outputs_2024-08-11"
    recorded = [m for m in prices if (root / m).is_dir()]
    assert (
        len(prices) == 51 and len(recorded) == 49
    )  # command-r-plus(-FC)-optimized have no recordings
    rows, ref = profile_costs(read_usages(root, models=recorded), prices)
    assert len(rows) == 51 and ref == Usage(input_tokens=336, output_tokens=38)
    assert [r.model for r in rows[:2]] == ["claude-3-opus-20240229-FC", "gpt-4-0613"]
    assert rows[48].model == "gemini-1.5-flash-preview-0514"
    opus_fc = rows[0]
    assert opus_fc.queries == 1630 and opus_fc.mean_output_tokens == pytest.approx(291.9, abs=0.05)
    assert opus_fc.real_over_list > 4  # verbose: 4x what the price sheet suggests
    assert all(r.reasoning_share is None for r in rows)  # no reasoning counts in 2024 recordings
    assert "claude-3-opus-20240229-FC" in markdown_table(rows, ref)


def test_fast_usage_reader_agrees_with_the_importer(shared_data):
    """read_usages skips decoding; it must read the same counts as data.recorded (incl. 0/0 = unknown)."""
    root = shared_data / "bfcl_v1_pool_outputs_2024-08-11"
    models = ["gemini-1.5-flash-preview-0514", "gpt-4-0613", "Salesforce_xLAM-1b-fc-r"]
    fast = read_usages(root, models=models)
    slow = usages_of(read_recordings(root, models=models))
    for m in models:
        assert sorted(map(repr, fast[m])) == sorted(map(repr, slow[m]))
    assert not any(u.known for u in fast["Salesforce_xLAM-1b-fc-r"])  # open weights: not measured
    assert sum(not u.known for u in fast["gemini-1.5-flash-preview-0514"]) >= 1
