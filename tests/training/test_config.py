"""The training config: the shipped YAML loads, overrides apply, bad values say how to fix them.

    .venv/bin/python -m pytest tests/training/test_config.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from data.errors import DataError
from training.config import load_train_config

TRAIN_YAML = Path(__file__).resolve().parents[2] / "configs" / "train.yaml"


def test_shipped_config_loads_and_says_how_to_run_it():
    cfg = load_train_config(TRAIN_YAML)
    assert cfg.mode == "frozen" and cfg.packing.max_tokens == 128 and cfg.folds == 5
    assert cfg.backbone.layers == 1  # the speed levers in use (docs/router.md "Speed")
    assert TRAIN_YAML.read_text().startswith("# switchcraft train --config configs/train.yaml")
    # the levers in use (docs/router.md): extra targets, the lexical branch, no temperatures
    assert cfg.aux.outputs == "auto" and cfg.aux.weight == 1.0
    assert cfg.lexical.enabled and cfg.lexical.weight == 0.5 and not cfg.temperature_scaling


def test_overrides_set_nested_values_parsed_as_yaml():
    cfg = load_train_config(TRAIN_YAML, ["mode=finetune", "finetune.epochs=2", "models=[a, b]", "out_dir=x/y"])
    assert cfg.mode == "finetune" and cfg.finetune.epochs == 2 and cfg.models == ["a", "b"]
    assert cfg.router_dir == Path("x/y")


@pytest.mark.parametrize("override, match", [
    ("mode=fast", r"field 'mode'.*allowed: 'frozen' or 'finetune'"),
    ("packing.max_tokens=4", r"field 'packing.max_tokens'.*greater than or equal to 16"),
    ("frozen.lr=0.1", r"field 'frozen.lr'.*known keys here: epochs, batch_size, head_lr"),
    ("max_folds=9", r"max_folds=9 exceeds folds=5"),
    ("models=[a, a]", r"list each model once"),
    ("lexical.weight=0", r"field 'lexical.weight'.*greater than 0"),
    ("aux.weight=-1", r"field 'aux.weight'.*greater than or equal to 0"),
    ("nonsense", r"not key=value"),
])
def test_bad_values_name_the_field_and_the_fix(override, match):
    with pytest.raises(DataError, match=match):
        load_train_config(TRAIN_YAML, [override])


def test_an_override_is_named_on_the_command_line_and_a_file_value_by_its_line(tmp_path):
    with pytest.raises(DataError, match=r"^<command line>: field 'frozen.lr': .*known keys here: .*; the override 'frozen.lr=0.1'\)$"):
        load_train_config(TRAIN_YAML, ["frozen.lr=0.1"])
    bad = tmp_path / "train.yaml"
    bad.write_text("mode: frozen\nlexical:\n  enabled: true\n  weight: 7\n")
    with pytest.raises(DataError, match=r"train.yaml:4: field 'lexical.weight'"):
        load_train_config(bad, ["mode=frozen"])
    with pytest.raises(DataError) as e:
        load_train_config(TRAIN_YAML, ["max_folds=9"])  # a check over the whole config: no line to name
    assert e.value.line is None and "exceeds folds" in str(e.value)
