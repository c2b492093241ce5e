"""The model pool (`configs/pool.yaml`): which LLMs, where they are served, what they cost.

    from data.pool import load_pool, check_costable
    pool = load_pool("configs/pool.yaml")
    check_costable(pool, "../shared/data/bfcl_v1_pool_outputs_2024-08-11", pool_path="configs/pool.yaml")
    pool.cost_usd("gpt-4-0613", Usage(input_tokens=300, output_tokens=12))

Each model is priced one of three ways (exactly one per model, in `prices:`):

- per token, `{input_per_mtok, output_per_mtok[, reasoning_per_mtok]}`: USD per
  million tokens × the output's recorded usage (API models). An output without
  token counts has an unknown cost (None, never 0).
- per GPU-second, `{gpu_usd_per_hour[, gpu_seconds_per_query]}`: cost =
  seconds × gpu_usd_per_hour / 3600 (self-hosted, open-weight models). With
  `gpu_seconds_per_query` every query costs that many seconds; without it,
  each output's recorded `latency_s`. BFCL's convention, followed here: the
  price is the whole serving node's (Azure's 8×V100 pay-as-you-go price,
  22.032 USD/hour, `v100_x8_usd_per_hour` in `bfcl_v1_prices_2024-08.json`),
  and the seconds are the node's wall time per query in a batched run (BFCL's
  `oss_total_latency_seconds_for_1700_queries_on_8xV100` / 1,700; BFCL's
  recordings of these models carry neither token counts nor latencies), so
  Meta-Llama-3-70B-Instruct costs 307 / 1700 × 22.032 / 3600 = 0.00111 USD per
  query (`open_weight_prices` reads them all). A recorded latency is one
  request's time, not the node's: if the server answers k requests at once,
  divide the node's hourly price by k.
- per query, `{usd_per_query}`: a flat price per call.

A pool whose model cannot be costed from its recordings (a per-token price for a
model whose recordings hold no token counts, a per-GPU-second price without
`gpu_seconds_per_query` for one whose recordings hold no latencies) is refused by
`check_costable` before any work is done: a router cannot weigh a model whose
cost it never sees.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from data.errors import DataError
from data.schema import Output, Usage
from data.wire import registry
from data.yaml_config import line_of, load_yaml_model

DEFAULT_POOL = Path("configs/pool.yaml")
PriceKind = Literal["token", "gpu_time", "query"]
# The fields of each kind of price, and those a price of that kind must have.
PRICE_FIELDS: dict[str, tuple[str, ...]] = {
    "token": ("input_per_mtok", "output_per_mtok", "reasoning_per_mtok", "cached_input_per_mtok",
              "cache_write_per_mtok"),
    "gpu_time": ("gpu_usd_per_hour", "gpu_seconds_per_query"),
    "query": ("usd_per_query",),
}
REQUIRED_FIELDS = {"token": ("input_per_mtok", "output_per_mtok"), "gpu_time": ("gpu_usd_per_hour",),
                   "query": ("usd_per_query",)}
PRICE_FORMS = ("{input_per_mtok: X, output_per_mtok: Y} (per million tokens), "
               "{gpu_usd_per_hour: X[, gpu_seconds_per_query: S]} (per GPU-second) or {usd_per_query: X}")
KIND_WORDS = {"token": "per token", "gpu_time": "per GPU-second", "query": "per query"}
BFCL_OPEN_WEIGHT_QUERIES = 1700  # BFCL divides its open-weight total latency by 1,700 queries


class Prices(BaseModel):
    """What one model's calls cost, in USD: per token, per GPU-second or per query (module docstring).

    Per token, reasoning tokens are billed as output unless `reasoning_per_mtok` is given, and input read from
    the provider's prompt cache (`cached_input_per_mtok`) or written to it (`cache_write_per_mtok`) at the input
    price unless those are given.
    """

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float | None = Field(default=None, ge=0)
    output_per_mtok: float | None = Field(default=None, ge=0)
    reasoning_per_mtok: float | None = Field(default=None, ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0, description="Input read from the cache.")
    cache_write_per_mtok: float | None = Field(default=None, ge=0, description="Input written to the cache.")
    gpu_usd_per_hour: float | None = Field(default=None, ge=0, description="The serving node's price.")
    gpu_seconds_per_query: float | None = Field(
        default=None, gt=0, description="Node seconds per query; unset: each output's recorded latency."
    )
    usd_per_query: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_kind(self) -> Prices:
        given = {k for k, fields in PRICE_FIELDS.items() if any(getattr(self, f) is not None for f in fields)}
        if len(given) != 1:
            kinds = ", ".join(KIND_WORDS[k] for k in sorted(given))
            what = f"prices of {len(given)} kinds ({kinds})" if given else "no price"
            raise ValueError(f"{what}; give exactly one kind: {PRICE_FORMS}")
        (kind,) = given
        missing = [f for f in REQUIRED_FIELDS[kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a price {KIND_WORDS[kind]} also needs {', '.join(missing)}; forms: {PRICE_FORMS}")
        return self

    @property
    def kind(self) -> PriceKind:
        return next(k for k, fields in REQUIRED_FIELDS.items() if getattr(self, fields[0]) is not None)

    def cost_usd(self, usage: Usage, latency_s: float | None = None) -> float | None:
        """Real cost of one call, or None when what it is priced by was not recorded.

        Per token: from `usage`; per GPU-second: `gpu_seconds_per_query`, else
        `latency_s`; per query: the flat price.
        """
        if self.usd_per_query is not None:
            return self.usd_per_query
        if self.gpu_usd_per_hour is not None:
            seconds = self.gpu_seconds_per_query if self.gpu_seconds_per_query is not None else latency_s
            return None if seconds is None else seconds * self.gpu_usd_per_hour / 3600
        if not usage.known:
            return None
        reasoning = usage.reasoning_tokens or 0
        r_price = self.reasoning_per_mtok if self.reasoning_per_mtok is not None else self.output_per_mtok
        # OpenAI counts reasoning tokens inside completion_tokens; price them apart only when asked.
        output = usage.output_tokens if self.reasoning_per_mtok is None else max(usage.output_tokens - reasoning, 0)
        extra = reasoning * r_price if self.reasoning_per_mtok is not None else 0.0
        return (self._input_usd(usage) + output * self.output_per_mtok + extra) / 1e6

    def _input_usd(self, usage: Usage) -> float:
        """Input tokens × their price (per million): cache reads and writes at theirs when the usage has them."""
        cached, written = usage.cached_input_tokens or 0, usage.cache_write_tokens or 0
        if not cached and not written:
            return usage.input_tokens * self.input_per_mtok
        fresh = max(usage.input_tokens - cached - written, 0)
        return fresh * self.input_per_mtok + cached * self.cached_input_price + written * self.cache_write_price

    @property
    def cached_input_price(self) -> float:
        """USD per million input tokens read from the cache (the input price when none is given)."""
        return self.cached_input_per_mtok if self.cached_input_per_mtok is not None else self.input_per_mtok

    @property
    def cache_write_price(self) -> float:
        """USD per million input tokens written to the cache (the input price when none is given)."""
        return self.cache_write_per_mtok if self.cache_write_per_mtok is not None else self.input_per_mtok

    def output_cost_usd(self, out: Output) -> float | None:
        """Real cost of one recorded output: its usage and its latency, as this price needs."""
        return self.cost_usd(out.usage, out.latency_s)

    @property
    def recorded_need(self) -> str | None:
        """What this price needs each recorded output to carry: "token counts", "latencies" or nothing."""
        if self.kind == "token":
            return "token counts"
        return "latencies" if self.kind == "gpu_time" and self.gpu_seconds_per_query is None else None


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
    api: str = Field(default="openai_chat", description="The API its provider speaks at base_url: a registered wire "
                     "API (data/wire/).")
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
        default=False, description="Send the example id (metadata.example_id; in Messages, metadata.user_id, the one "
        "metadata field it takes) so a (replay) server can match by id."
    )

    @field_validator("api", mode="before")
    @classmethod
    def _known_api(cls, v):
        if not isinstance(v, str) or v not in registry.load():
            known = ", ".join(f"{n}: POST {registry.get(n).path}" for n in registry.names())
            raise ValueError(f"api {str(v)[:60]!r} is not one of the wire APIs {', '.join(registry.names())}: give "
                             f"the API the provider at base_url speaks ({known})")
        return v

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

    benchmark: str = Field(default="bfcl_v1", description="What the pool's recordings answered (reproduce's data): "
                           "a benchmark of data/benchmarks/, whose questions and recordings `switchcraft reproduce` "
                           "ingests, imports and labels.")
    models: list[PoolModel] = Field(min_length=1)

    @field_validator("benchmark")
    @classmethod
    def _known_benchmark(cls, v: str) -> str:
        from data.benchmarks import names

        if v not in names():
            raise ValueError(f"unknown benchmark {v[:60]!r}; known: {', '.join(names())} (each a module of "
                             "data/benchmarks/)")
        return v

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

    def cost_usd(self, name: str, usage: Usage, latency_s: float | None = None) -> float | None:
        return self.get(name).prices.cost_usd(usage, latency_s)


def load_pool(path: str | Path = DEFAULT_POOL) -> Pool:
    return load_yaml_model(path, Pool, hint="run from the repository root or pass --pool")


def load_price_table(path: str | Path) -> dict[str, Prices]:
    """BFCL's 2024 list prices (`bfcl_v1_prices_2024-08.json`): API model → per-token Prices."""
    raw = _read_price_file(path)
    out = {}
    for name, p in (raw.get("models") or {}).items():
        try:
            out[name] = Prices.model_validate(p)
        except ValidationError as e:
            raise DataError(str(e.errors()[0]["msg"]), path=path, field=f"models.{name}") from None
    return out


def _read_price_file(path: str | Path) -> dict:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError("price file not found", path=path) from None
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None


def open_weight_prices(path: str | Path) -> dict[str, Prices]:
    """BFCL's GPU-second prices of its open-weight models, by recording folder
    (`meta-llama/Meta-Llama-3-70B-Instruct` → `meta-llama_Meta-Llama-3-70B-Instruct`):
    the 8×V100 node's hourly price and its total seconds for 1,700 queries / 1,700."""
    raw = _read_price_file(path)
    node = raw.get("v100_x8_usd_per_hour")
    totals = raw.get("oss_total_latency_seconds_for_1700_queries_on_8xV100")
    if not isinstance(node, (int, float)) or not isinstance(totals, dict):
        raise DataError("no open-weight prices", path=path, field="v100_x8_usd_per_hour",
                        hint="expected v100_x8_usd_per_hour and oss_total_latency_seconds_for_1700_queries_on_8xV100")
    out = {}
    for name, seconds in totals.items():
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            raise DataError(f"expected a positive number of seconds, got {seconds!r}", path=path,
                            field=f"oss_total_latency_seconds_for_1700_queries_on_8xV100.{name}")
        out[name.replace("/", "_")] = Prices(gpu_usd_per_hour=node,
                                             gpu_seconds_per_query=seconds / BFCL_OPEN_WEIGHT_QUERIES)
    return out


def check_costable(
    pool: Pool,
    recordings: str | Path,
    *,
    pool_path: str | Path | None = None,
    price_file: str | Path | None = None,
) -> None:
    """Refuse a pool a model of which could not be costed from `recordings` (a folder of
    BFCL result files, or an outputs.parquet): priced per token with no token counts in
    any of its recorded rows, or per GPU-second from latencies with no latency recorded.

    Each such model's rows are read only until one carries what its price needs (a peek,
    for a model that is fine). Models without recordings here are left to the importer,
    which names them. `price_file` (BFCL's) puts the model's own GPU-second price in the fix.
    """
    needs = {m.recording: m.prices.recorded_need for m in pool.models if m.prices.recorded_need}
    if not needs:
        return
    if not Path(recordings).exists():
        raise DataError("no such outputs file or folder", path=recordings,
                        hint="give an outputs.parquet or a folder of BFCL result files")
    recorded, fed = _models_fed(Path(recordings), needs)
    bad = [(i, m) for i, m in enumerate(pool.models) if m.recording in recorded - fed]
    if not bad:
        return
    suggested = open_weight_prices(price_file) if price_file and Path(price_file).is_file() else {}
    loc = ("models", bad[0][0], "prices")
    raise DataError(
        "; ".join(_uncostable(m, recordings, suggested.get(m.recording)) for _, m in bad),
        path=pool_path,
        line=line_of(pool_path, loc) if pool_path else None,
        field=".".join(map(str, loc)),
        hint="every pool model needs a price its recordings can feed: see the header of configs/pool.yaml",
    )


def _uncostable(m: PoolModel, recordings: str | Path, suggestion: Prices | None) -> str:
    where = f"its recordings ({m.recording} in {recordings})"
    if m.prices.kind == "token":
        if suggestion is not None:
            gpu = (f"{{gpu_usd_per_hour: {suggestion.gpu_usd_per_hour:g}, "
                   f"gpu_seconds_per_query: {suggestion.gpu_seconds_per_query:.6g}}} "
                   f"(BFCL's 8xV100 price and its total latency / {BFCL_OPEN_WEIGHT_QUERIES} queries)")
        else:
            gpu = ("{gpu_usd_per_hour: 22.032, gpu_seconds_per_query: S} (BFCL's 8xV100 price; S = the model's "
                   "oss_total_latency_seconds_for_1700_queries_on_8xV100 / 1700 in bfcl_v1_prices_2024-08.json)")
        return (f"model {m.name!r} is priced per token but {where} hold no token counts, so no answer of it "
                f"could be costed (BFCL records none for open-weight models); price it per GPU-second: "
                f"prices: {gpu}, or per query: prices: {{usd_per_query: X}}")
    return (f"model {m.name!r} is priced per GPU-second from latencies but {where} hold no latency; "
            f"give the node seconds per query: prices: {{gpu_usd_per_hour: "
            f"{m.prices.gpu_usd_per_hour:g}, gpu_seconds_per_query: S}}, or price it per query")


def _models_fed(recordings: Path, needs: dict[str, str]) -> tuple[set[str], set[str]]:
    """(models recorded here, models with at least one row carrying what their price needs)."""
    recorded: set[str] = set()
    fed: set[str] = set()
    for model, tokens, latency in _recorded_rows(recordings, set(needs), fed):
        recorded.add(model)
        if (tokens if needs[model] == "token counts" else latency):
            fed.add(model)
    return recorded, fed


def _recorded_rows(recordings: Path, models: set[str], done: set[str]) -> Iterator[tuple[str, bool, bool]]:
    """(model, has token counts, has latency) per recorded row of `models`; a model in
    `done` (filled by the caller as it goes) is read no further."""
    if recordings.suffix == ".parquet":
        import pyarrow.parquet as pq

        cols = pq.read_table(recordings, columns=["model", "usage", "latency_s"]).to_pydict()
        for model, usage, latency in zip(cols["model"], cols["usage"], cols["latency_s"]):
            if model in models and model not in done:
                u = json.loads(usage) if isinstance(usage, str) else (usage or {})
                yield model, u.get("input_tokens") is not None and u.get("output_tokens") is not None, latency is not None
        return
    from data.benchmarks import detect

    yield from detect(recordings).recorded_usage(recordings, models, done)
