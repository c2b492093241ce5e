"""configs/tools.yaml loads; a bad value is reported with its file, line and field."""

from pathlib import Path

import pytest

from data.errors import DataError
from serving.tools.config import load_tools_config

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tools.yaml"


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
