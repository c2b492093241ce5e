"""The training stage's configuration (`configs/train.yaml`), typed and validated.

    from training.config import load_train_config
    cfg = load_train_config("configs/train.yaml", ["mode=finetune", "finetune.epochs=1"])

Every field has a default; the YAML and `key=value` overrides (dotted keys for
sections, values parsed as YAML) change them. Bad values raise `DataError`
naming the file and field and saying what would fix them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from data.yaml_config import apply_overrides, read_yaml, validate_model

DEFAULT_CONFIG = Path("configs/train.yaml")


class PackingSettings(BaseModel):
    """How a request is packed into the encoder's window (see training/packing.py)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(default=512, ge=16, le=8192, description="Window, special tokens included.")
    user_cap_fraction: float = Field(
        default=0.5, gt=0, le=1, description="Share of the window the last user turn may take when others need room."
    )
    description_words: int = Field(default=8, ge=0, description="Words of each tool description kept (0: none).")
    enum_values: int = Field(default=3, ge=1, description="Enum values shown before '|…'.")


class BackboneSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="all-MiniLM-L6-v2", min_length=1, description="Alias, hub name or local folder.")
    init: Literal["pretrained", "random"] = Field(
        default="pretrained", description="'random' builds the encoder from its config (no weights needed)."
    )
    pooling: Literal["mean", "cls", "segments"] = Field(
        default="mean", description="segments: mean of user, tools and turns apart, plus user*tools."
    )
    tokenizer: str | None = Field(default=None, description="Tokenizer folder, when the backbone's own is not here.")
    layers: int | None = Field(default=None, ge=1, description="Keep only the first N transformer layers (a faster "
                               "router: the cost of the encoder is about linear in its depth); null: all of them.")


class FinetuneSettings(BaseModel):
    """The whole encoder trains (the paper's setting)."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(default=3, ge=1)
    batch_size: int = Field(default=16, ge=1)
    lr: float = Field(default=3e-5, gt=0, lt=1)
    head_lr: float = Field(default=1e-3, gt=0, lt=1)
    patience: int = Field(default=1, ge=1)
    # Caps for timing runs: stop an epoch after this many steps.
    max_steps_per_epoch: int | None = Field(default=None, ge=1)


class FrozenSettings(BaseModel):
    """Encoder features are computed once and cached; only the head trains."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(default=200, ge=1)
    batch_size: int = Field(default=64, ge=1)
    head_lr: float = Field(default=1e-3, gt=0, lt=1)
    patience: int = Field(default=10, ge=1)
    feature_batch_size: int = Field(default=32, ge=1)


class AuxSettings(BaseModel):
    """Extra training targets: recorded models outside the pool (training/aux_targets.py). Never served."""

    model_config = ConfigDict(extra="forbid")

    outputs: str | None = Field(
        default="auto", description="An outputs.parquet; 'auto': <run_dir>/outputs.parquet if it exists; null: none."
    )
    weight: float = Field(default=1.0, ge=0, description="Loss weight of each extra label (a pool label weighs 1).")


class LexicalSettings(BaseModel):
    """The lexical branch (training/lexical.py): TF-IDF of the packed word pieces + LR, blended with the head."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    weight: float = Field(default=0.5, gt=0, le=1, description="Its share of the blended logit; the head has the rest.")
    min_df: int = Field(default=2, ge=1, description="Keep a feature found in at least this many training requests.")
    max_features: int | None = Field(default=50_000, ge=1)
    buckets: int = Field(default=1 << 20, ge=1, description="Hash slots for pairs of consecutive word pieces.")
    c: float = Field(default=1.0, gt=0, description="Inverse L2 strength of each logistic regression.")


class CategorySettings(BaseModel):
    """The category branch (training/category.py): P(category | request shape) × per-category success rates.
    It reads the lexical branch's TF-IDF, so it is fitted only when `lexical.enabled`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    weight: float = Field(default=0.5, gt=0, le=1, description="Its share of the router's logit; the head and lexical "
                          "blend have the rest.")
    c: float = Field(default=1.0, gt=0, description="Inverse L2 strength of the category classifier.")
    prior_rows: float = Field(default=5.0, ge=0, description="Pseudo-rows pulling a category's rate to the model's overall rate.")


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_dir: str = "runs/default"
    out_dir: str | None = Field(default=None, description="Router folder (default: <run_dir>/router).")
    labels: str = "runs/default/labels.parquet"
    examples: str | None = Field(default=None, description="An examples.parquet; or give source + source_path.")
    source: str | None = "bfcl_v1"
    source_path: str | None = "../shared/data/bfcl_v1"
    pool: str = "configs/pool.yaml"
    models: list[str] | None = Field(default=None, description="Subset of the pool to route over (default: all).")
    max_examples: int | None = Field(default=None, ge=2, description="Use only this many examples (smoke runs).")

    mode: Literal["frozen", "finetune"] = "frozen"
    backbone: BackboneSettings = Field(default_factory=BackboneSettings)
    packing: PackingSettings = Field(default_factory=PackingSettings)
    finetune: FinetuneSettings = Field(default_factory=FinetuneSettings)
    frozen: FrozenSettings = Field(default_factory=FrozenSettings)
    aux: AuxSettings = Field(default_factory=AuxSettings)
    lexical: LexicalSettings = Field(default_factory=LexicalSettings)
    category: CategorySettings = Field(default_factory=CategorySettings)

    head_hidden: int = Field(default=256, ge=1)
    dropout: float = Field(default=0.1, ge=0, lt=1)
    weight_decay: float = Field(default=0.01, ge=0)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    pos_weight: Literal["none", "balanced"] = "none"

    folds: int = Field(default=5, ge=2, description="k of grouped k-fold cross-validation.")
    max_folds: int | None = Field(default=None, ge=1, description="Run only the first n folds (timing runs).")
    val_fraction: float = Field(default=0.1, gt=0, lt=0.5, description="Share of training groups for early stopping.")
    final_fit: bool = Field(default=True, description="After CV, train the saved router on all examples.")
    temperature_scaling: bool = Field(default=False, description="Per-model temperatures, kept where they lower held-out ECE.")
    threshold: float = Field(default=0.5, gt=0, lt=1)
    seed: int = 0
    num_threads: int | None = Field(default=None, ge=1, description="torch threads (default: torch's choice).")
    progress: bool = True

    @field_validator("models")
    @classmethod
    def _models_unique(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v:
                raise ValueError("models: give at least one model name, or leave it out to use the whole pool")
            if len(set(v)) != len(v):
                raise ValueError("models: a name is repeated; list each model once")
        return v

    @model_validator(mode="after")
    def _one_example_source(self) -> TrainConfig:
        if self.examples is None and not (self.source and self.source_path):
            raise ValueError("say where the examples are: examples=PATH.parquet, or source=NAME source_path=DIR")
        if self.max_folds is not None and self.max_folds > self.folds:
            raise ValueError(f"max_folds={self.max_folds} exceeds folds={self.folds}; lower it or raise folds")
        return self

    @property
    def router_dir(self) -> Path:
        return Path(self.out_dir) if self.out_dir else Path(self.run_dir) / "router"

    @property
    def aux_outputs(self) -> Path | None:
        """The recorded outputs whose non-pool models become extra targets, or None."""
        if self.aux.outputs is None:
            return None
        if self.aux.outputs == "auto":
            path = Path(self.run_dir) / "outputs.parquet"
            return path if path.exists() else None
        return Path(self.aux.outputs)


def load_train_config(path: str | Path = DEFAULT_CONFIG, overrides: list[str] | None = None) -> TrainConfig:
    """Load, apply `key=value` overrides, and validate."""
    path = Path(path)
    raw = apply_overrides(read_yaml(path, hint="run from the repository root or pass --config"), overrides or [])
    return validate_model(path, raw, TrainConfig, overrides, hint_of=_fix_hint)


def _fix_hint(err: dict[str, Any]) -> str | None:
    if err["type"] == "extra_forbidden":
        section = TrainConfig
        for part in err["loc"][:-1]:
            section = section.model_fields[part].annotation if part in section.model_fields else section
        known = ", ".join(getattr(section, "model_fields", {}))
        return f"unknown key; known keys here: {known}"
    if err["type"] == "literal_error":
        return f"allowed: {err['ctx']['expected']}"
    return None
