"""The model pool (`configs/pool.yaml`): which LLMs, where they are served, what they cost.

    from data.pool import load_pool
    pool = load_pool("configs/pool.yaml")
    pool.cost_usd("gpt-4-0613", Usage(input_tokens=300, output_tokens=12))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from data.errors import DataError
from data.schema import Usage
from data.yaml_config import load_yaml_model

DEFAULT_POOL = Path("configs/pool.yaml")


class Prices(BaseModel):
    """USD per million tokens. Reasoning tokens are billed as output unless said otherwise."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    reasoning_per_mtok: float | None = Field(default=None, ge=0)

    def cost_usd(self, usage: Usage) -> float | None:
        """Real cost of one call, or None when its usage was not recorded."""
        if not usage.known:
            return None
        reasoning = usage.reasoning_tokens or 0
        r_price = self.reasoning_per_mtok if self.reasoning_per_mtok is not None else self.output_per_mtok
        # OpenAI counts reasoning tokens inside completion_tokens; price them apart only when asked.
        output = usage.output_tokens if self.reasoning_per_mtok is None else max(usage.output_tokens - reasoning, 0)
        extra = reasoning * r_price if self.reasoning_per_mtok is not None else 0.0
        return (usage.input_tokens * self.input_per_mtok + output * self.output_per_mtok + extra) / 1e6


class PoolModel(BaseModel):
    """One model of the pool."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Our name for it; labels and the router use this.")
    model_id: str | None = Field(default=None, description="The id the endpoint expects (default: name).")
    recorded_as: str | None = Field(default=None, description="Its folder in recorded BFCL outputs (default: name).")
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str | None = Field(default=None, description="Name of the environment variable holding the key.")
    prices: Prices
    prompt_style: Literal["native", "prompt"] = "native"
    concurrency: int = Field(default=4, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=60.0, gt=0)
    # Added for the pool runner (all optional; defaults keep older pool files valid).
    max_retries: int = Field(default=6, ge=0, description="Retries on 429/5xx/timeouts/dropped connections.")
    temperature: float | None = Field(default=None, ge=0, description="Sent when set; else the endpoint's default.")
    max_output_tokens: int | None = Field(
        default=None, ge=1, description="Sent as max_tokens; makes the --max-usd bound strict."
    )
    send_metadata: bool = Field(
        default=False, description="Send metadata.example_id so a (replay) server can match by id."
    )

    @field_validator("api_key_env")
    @classmethod
    def _env_name_not_key(cls, v: str | None) -> str | None:
        if v and (v.startswith("sk-") or len(v) > 64 or not v.replace("_", "").isalnum()):
            raise ValueError("api_key_env is the NAME of an environment variable (like OPENAI_API_KEY), not a key")
        return v

    @property
    def endpoint_model(self) -> str:
        return self.model_id or self.name

    @property
    def recording(self) -> str:
        return self.recorded_as or self.name


class Pool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[PoolModel] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Pool:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"model names must be unique; repeated: {dupes}")
        return self

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def get(self, name: str) -> PoolModel:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"model {name!r} is not in the pool; pool: {', '.join(self.names)}")

    def cost_usd(self, name: str, usage: Usage) -> float | None:
        return self.get(name).prices.cost_usd(usage)


def load_pool(path: str | Path = DEFAULT_POOL) -> Pool:
    return load_yaml_model(path, Pool, hint="run from the repository root or pass --pool")


def load_price_table(path: str | Path) -> dict[str, Prices]:
    """BFCL's 2024 list prices (`bfcl_v1_prices_2024-08.json`): model → Prices."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError("price file not found", path=path) from None
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
    out = {}
    for name, p in (raw.get("models") or {}).items():
        try:
            out[name] = Prices.model_validate(p)
        except ValidationError as e:
            raise DataError(str(e.errors()[0]["msg"]), path=path, field=f"models.{name}") from None
    return out
