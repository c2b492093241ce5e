"""The data stage's configuration (`configs/data.yaml`), typed and validated."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data.errors import DataError
from data.yaml_config import load_yaml_model

DEFAULT_CONFIG = Path("configs/data.yaml")
DATA_ROOT_ENV = "SWITCHCRAFT_DATA_ROOT"


class SourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    enabled: bool = True
    options: dict[str, Any] = Field(default_factory=dict)


class DataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_root: str = "../shared/data"
    out_dir: str = "runs/default"
    sources: dict[str, SourceConfig] = Field(default_factory=dict)
    outputs: dict[str, str] = Field(default_factory=dict)

    def resolve(self, template: str | None) -> str | None:
        """Expand `{data_root}` and `package:NAME/sub` in a configured path."""
        if template is None:
            return None
        value = template.replace("{data_root}", self.data_root)
        if value.startswith("package:"):
            return str(package_path(value.removeprefix("package:")))
        return value

    def source_path(self, name: str) -> str | None:
        src = self.sources.get(name)
        return self.resolve(src.path) if src else None

    def output_path(self, name: str) -> str | None:
        """`outputs.<name>`; for a benchmark not given there, its recordings' folder under the data root
        (`data.benchmarks`)."""
        template = self.outputs.get(name)
        if template is None:
            from data.benchmarks import get, names

            if name in names():
                template = "{data_root}/" + get(name).recordings
        return self.resolve(template)


def package_path(spec: str) -> Path:
    """`bfcl_eval/data` → the folder inside the installed package."""
    pkg, _, sub = spec.partition("/")
    found = importlib.util.find_spec(pkg)
    if found is None or not found.submodule_search_locations:
        raise DataError(
            f"Python package {pkg!r} is not installed",
            hint="install it (for bfcl_eval: pip install --no-deps bfcl-eval) or point the source at a folder",
        )
    return Path(list(found.submodule_search_locations)[0]) / sub


def load_data_config(path: str | Path = DEFAULT_CONFIG, *, data_root: str | None = None) -> DataConfig:
    """Load and validate; `data_root` (or $SWITCHCRAFT_DATA_ROOT) overrides the file's."""
    cfg = load_yaml_model(path, DataConfig, hint="run from the repository root or pass --config")
    root = data_root or os.environ.get(DATA_ROOT_ENV)
    if root:
        cfg.data_root = root
    return cfg
