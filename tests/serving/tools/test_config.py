"""configs/tools.yaml loads; a bad value is reported with its file, line and field."""

import pytest

from data.errors import DataError
from serving.tools.config import load_tools_config
from tests.conftest import REPO

CONFIG = REPO / "configs" / "tools.yaml"


def test_repo_config_loads():
    cfg = load_tools_config(CONFIG)
    assert cfg.retrieval.top_k == 5 and cfg.groups.min_confidence <= cfg.groups.confidence_threshold
    assert CONFIG.read_text().startswith("# ")


def test_bad_value_names_line_and_field(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("# x\nretrieval:\n  top_k: 5\ngroups:\n  max_groups: 0\n")
    with pytest.raises(DataError) as e:
        load_tools_config(p)
    assert e.value.field == "groups.max_groups" and e.value.line == 5


def test_inconsistent_thresholds(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("groups: {confidence_threshold: 0.3, min_confidence: 0.6}\n")
    with pytest.raises(DataError, match="min_confidence"):
        load_tools_config(p)


def test_a_missing_trained_encoder_says_how_to_make_it(tmp_path):
    from serving.tools.index import checked_model_dir

    p = tmp_path / "t.yaml"
    p.write_text(f"encoder: {tmp_path / 'nothing'}\ntrain: {{max_seq_length: 64, data: {{max_queries: {{xlam: 5}}}}}}\n")
    cfg = load_tools_config(p)
    assert cfg.train.data.max_queries == {"xlam": 5} and cfg.train.max_seq_length == 64
    with pytest.raises(FileNotFoundError, match="encoder: .*switchcraft tools train.*encoder: null"):
        checked_model_dir(cfg.encoder, "encoder")
    assert checked_model_dir(None, "encoder") is None
    p.write_text(f"query_encoder: {tmp_path}\n")
    with pytest.raises(DataError, match="set encoder too"):
        load_tools_config(p)
