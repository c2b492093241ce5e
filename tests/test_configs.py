"""Every configs/*.yaml loads and validates with its stage's loader."""

from pathlib import Path

import pytest

from data.config import load_data_config
from data.pool import load_pool
from serving.gateway.config import load_serving_config
from serving.mcp.config import load_mcp_config
from serving.tools.config import load_tools_config
from training.config import load_train_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
LOADERS = {"data.yaml": load_data_config, "pool.yaml": load_pool, "tools.yaml": load_tools_config, "train.yaml": load_train_config,
           "serving.yaml": load_serving_config, "mcp.yaml": load_mcp_config}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_config_loads(path):
    assert path.name in LOADERS, f"{path.name}: add its loader to LOADERS in {__file__}"
    assert LOADERS[path.name](path) is not None
    first = path.read_text().splitlines()[0]
    assert first.startswith("#"), f"{path.name}: the first line must be a comment saying how to run it"


def test_pool_prices_and_bad_key(tmp_path):
    from data.errors import DataError
    from data.schema import Usage

    pool = load_pool(CONFIGS / "pool.yaml")
    assert len(pool.models) == 8
    assert pool.cost_usd("gpt-4-0613", Usage(input_tokens=1_000_000, output_tokens=0)) == pytest.approx(30.0)
    assert pool.cost_usd("gpt-4-0613", Usage()) is None  # unknown usage is unknown cost, not zero
    bad = tmp_path / "pool.yaml"
    bad.write_text("models:\n  - name: m\n    api_key_env: sk-abc123\n    prices: {input_per_mtok: 1, output_per_mtok: 1}\n")
    with pytest.raises(DataError, match=r"models\.0\.api_key_env"):
        load_pool(bad)


POOLS = sorted((CONFIGS / "pools").glob("*.yaml"))


@pytest.mark.parametrize("path", POOLS, ids=lambda p: p.name)
def test_sample_pool_loads_and_can_be_costed(path, shared_data):
    from data.pool import check_costable

    first = path.read_text().splitlines()[0]
    assert first.startswith("# Run: switchcraft") and str(path.relative_to(CONFIGS.parent)) in first
    check_costable(load_pool(path), shared_data / "bfcl_v1_pool_outputs_2024-08-11", pool_path=path)


def test_mixed_pool_prices_open_weight_models_as_bfcl_does(shared_data):
    from data.pool import open_weight_prices

    bfcl = open_weight_prices(shared_data / "bfcl_v1_prices_2024-08.json")
    pool = load_pool(CONFIGS / "pools" / "mixed_open_weight.yaml")
    assert len(pool.models) == 8
    kinds = [m.prices.kind for m in pool.models]
    assert kinds.count("token") == 4 and kinds.count("gpu_time") == 4
    for m in pool.models:
        if m.prices.kind == "gpu_time":
            ref = bfcl[m.recording]
            assert m.prices.gpu_usd_per_hour == ref.gpu_usd_per_hour
            assert m.prices.gpu_seconds_per_query == pytest.approx(ref.gpu_seconds_per_query, rel=1e-5)


def test_the_serving_config_names_every_top_level_setting():
    """configs/serving.yaml is where an operator learns what can be set: each top-level setting is written out."""
    import yaml

    from serving.gateway.config import ServingConfig

    written = set(yaml.safe_load((CONFIGS / "serving.yaml").read_text()))
    missing = sorted(set(ServingConfig.model_fields) - written)
    assert not missing, f"configs/serving.yaml: add {missing} with their defaults and a comment"
