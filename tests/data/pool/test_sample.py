"""Drawing a pool from recordings: priced from the price file, prompt style read from the recordings."""

import json
from pathlib import Path

import yaml

import pytest

from data.errors import DataError
from data.pool import Pool
from data.pool.sample import recorded_style, sample_pool


@pytest.fixture()
def recordings(tmp_path):
    root = tmp_path / "rec"
    rows = {"api-FC": [{"id": "simple_0", "result": [{"f": "{\"a\": 1}"}]}],
            "api-prompt": [{"id": "simple_0", "result": "[f(a=1)]"}],
            "org_oss-7b": [{"id": "simple_0", "result": "\n\n[f(a=1)]"}],
            "unpriced": [{"id": "simple_0", "result": "[f(a=1)]"}]}
    for model, lines in rows.items():
        (root / model).mkdir(parents=True)
        (root / model / "simple.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({
        "models": {"api-FC": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                   "api-prompt": {"input_per_mtok": 3.0, "output_per_mtok": 4.0}},
        "oss_total_latency_seconds_for_1700_queries_on_8xV100": {"org/oss-7b": 170.0},
        "v100_x8_usd_per_hour": 36.0}))
    return root, prices


def test_every_priced_model_drawn_with_its_recorded_style_and_price(recordings):
    root, prices = recordings
    pool, skipped = sample_pool(root, prices, n=3, seed=0)
    by = {m["name"]: m for m in pool["models"]}
    assert set(by) == {"api-FC", "api-prompt", "org_oss-7b"}
    assert skipped == {"no price in the price file": ["unpriced"]}
    assert by["api-FC"]["prompt_style"] == "native" and by["api-prompt"]["prompt_style"] == "prompt"
    assert by["org_oss-7b"]["prices"] == {"gpu_usd_per_hour": 36.0, "gpu_seconds_per_query": 0.1}
    Pool.model_validate(pool)  # a valid pool file


def test_open_weight_count_and_impossible_draws(recordings):
    root, prices = recordings
    pool, _ = sample_pool(root, prices, n=2, seed=1, open_weight=1)
    assert "org_oss-7b" in {m["name"] for m in pool["models"]} and len(pool["models"]) == 2
    with pytest.raises(DataError, match="cannot draw 2 open-weight"):
        sample_pool(root, prices, n=3, open_weight=2)
    with pytest.raises(DataError, match="no such recordings folder"):
        sample_pool(root / "missing", prices)


def test_a_pool_too_small_or_larger_than_the_priced_models_is_refused(recordings):
    root, prices = recordings
    for n in (0, 1):
        with pytest.raises(DataError, match=f"at least 2 models to route between, not --n {n}"):
            sample_pool(root, prices, n=n)
    with pytest.raises(DataError, match=r"cannot draw 4 models: 3 recorded models are priced \(2 API, 1 open-weight; 1 have no price\)"):
        sample_pool(root, prices, n=4)
    with pytest.raises(DataError, match="--open-weight -1 must be between 0 and --n 2"):
        sample_pool(root, prices, n=2, open_weight=-1)


def test_recorded_style_reads_lists_as_native(recordings):
    root, _ = recordings
    assert recorded_style(root / "api-FC") == "native" and recorded_style(root / "org_oss-7b") == "prompt"


def test_sample_from_a_pool_file_keeps_each_models_entry_and_the_benchmark(tmp_path):
    from data.pool import load_pool
    from data.pool.sample import sample_from_pool

    src = Path("configs/pools/bfcl_v3_2025.yaml")
    drawn = sample_from_pool(src, n=5, seed=2)
    assert drawn["benchmark"] == "bfcl_v3" and len(drawn["models"]) == 5
    every = {m["name"]: m for m in yaml.safe_load(src.read_text())["models"]}
    assert all(m == every[m["name"]] for m in drawn["models"])  # priced and served as the file says
    order = list(every)
    assert [m["name"] for m in drawn["models"]] == sorted((m["name"] for m in drawn["models"]), key=order.index)
    assert drawn != sample_from_pool(src, n=5, seed=3)
    out = tmp_path / "p.yaml"
    out.write_text(yaml.safe_dump(drawn, sort_keys=False))
    assert load_pool(out).benchmark == "bfcl_v3"
    with pytest.raises(DataError, match="cannot draw 16 models from a pool of 15"):
        sample_from_pool(src, n=16)
