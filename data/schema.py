"""The data contracts shared by every stage: Example, Output, Label.

Each record is a validated pydantic model. On disk they live in parquet files
whose scalar fields are plain columns and whose nested fields (messages, tools,
expected answers, raw outputs, calls) are JSON strings: tool arguments hold
arbitrary JSON, which Arrow cannot type as one column, and JSON keeps every
value exactly as the source gave it.

    from data.schema import read_examples
    examples = read_examples("runs/default/examples.parquet")
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

JSON = Any


class Call(BaseModel):
    """One function call: a name and its arguments (JSON values)."""

    model_config = ConfigDict(frozen=False, extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, JSON] = Field(default_factory=dict)


class Message(BaseModel):
    """An OpenAI-style chat turn."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[Call] = Field(default_factory=list)
    # For tool turns: which function produced this result (when the source says).
    name: str | None = None

    @model_validator(mode="after")
    def _tool_calls_only_on_assistant(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant turns carry tool_calls, not {self.role!r} turns")
        return self


class Tool(BaseModel):
    """A function the model may call.

    `parameters` is normalised JSON Schema (see `data.tools.normalize_schema`);
    `original` keeps the function doc exactly as the source gave it.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, JSON] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    original: dict[str, JSON] = Field(default_factory=dict)


class ExpectedArg(BaseModel):
    """The acceptable values of one argument.

    `values` lists every acceptable value (BFCL's nested form, where the values
    inside dicts are again lists of acceptable values, is kept as is).
    `optional` marks that the argument may be omitted (BFCL writes `""` among
    the values for that; the `""` is removed from `values` here).
    """

    model_config = ConfigDict(extra="forbid")

    values: list[JSON] = Field(default_factory=list)
    optional: bool = False

    @model_validator(mode="after")
    def _something_acceptable(self) -> ExpectedArg:
        if not self.values and not self.optional:
            raise ValueError("an expected argument needs at least one acceptable value or optional=True")
        return self


class ExpectedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    args: dict[str, ExpectedArg] = Field(default_factory=dict)


class Expected(BaseModel):
    """What a correct answer looks like.

    Exactly one of:
    - `no_call=True`: the right answer is no call at all (relevance, irrelevance);
    - `any_call=True`: the right answer is at least one call to an offered
      tool, its arguments unchecked (BFCL v4 `live_relevance`);
    - `alternatives`: every acceptable answer; each answer is a list of calls
      matched as a set (order-insensitive).
    """

    model_config = ConfigDict(extra="forbid")

    no_call: bool = False
    any_call: bool = False
    alternatives: list[list[ExpectedCall]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Expected:
        if self.no_call + self.any_call + bool(self.alternatives) != 1:
            raise ValueError("expected: give exactly one of no_call=True, any_call=True, or alternatives")
        if any(len(alt) == 0 for alt in self.alternatives):
            raise ValueError("expected: an alternative with no calls; use no_call=True instead")
        return self

    @classmethod
    def anything(cls) -> Expected:
        return cls(any_call=True)

    @classmethod
    def nothing(cls) -> Expected:
        return cls(no_call=True)

    @classmethod
    def exact(cls, calls: Iterable[Call]) -> Expected:
        """One alternative whose every argument has exactly the given value."""
        return cls(
            alternatives=[
                [
                    ExpectedCall(
                        name=c.name,
                        args={k: ExpectedArg(values=[v]) for k, v in c.arguments.items()},
                    )
                    for c in calls
                ]
            ]
        )


class Example(BaseModel):
    """One tool-calling request with its expected answer."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    category: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] = Field(default_factory=list)
    expected: Expected
    meta: dict[str, JSON] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _source_prefixed(cls, v: str) -> str:
        if ":" not in v:
            raise ValueError(f"example id {v!r} must be source-prefixed, like 'bfcl_v1:simple_0'")
        return v

    @property
    def question(self) -> str:
        """The text of the last user turn (what the request is about)."""
        for m in reversed(self.messages):
            if m.role == "user" and m.content:
                return m.content
        return ""


class Usage(BaseModel):
    """Token usage of one call. None means "not recorded", never zero."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    reasoning_tokens: int | None = Field(default=None, ge=0)
    # Of input_tokens, those read from / written to the provider's prompt cache (priced apart, data.pool.Prices).
    cached_input_tokens: int | None = Field(default=None, ge=0)
    cache_write_tokens: int | None = Field(default=None, ge=0)

    @property
    def known(self) -> bool:
        return self.input_tokens is not None and self.output_tokens is not None

    @model_serializer(mode="wrap")
    def _without_unknown_cache(self, handler) -> dict[str, Any]:
        """Cache counts only when a provider gave them: stored usage of uncached calls stays as it was."""
        out = handler(self)
        for k in ("cached_input_tokens", "cache_write_tokens"):
            if out.get(k, 0) is None:
                out.pop(k)
        return out


class Output(BaseModel):
    """What one model returned for one example, decoded."""

    model_config = ConfigDict(extra="forbid")

    example_id: str = Field(min_length=1)
    model: str = Field(min_length=1)
    raw: JSON
    calls: list[Call] | None = None
    decode_error: str | None = None
    # Which decoder read `raw` (e.g. "python", "native_fc"), or None.
    decoder: str | None = None
    usage: Usage = Field(default_factory=Usage)
    latency_s: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _decoded_or_error(self) -> Output:
        if (self.calls is None) == (self.decode_error is None):
            raise ValueError("an output has either decoded calls or a decode_error, exactly one")
        return self


class Label(BaseModel):
    """Whether a model's output for an example is exactly right, and what it cost."""

    model_config = ConfigDict(extra="forbid")

    example_id: str = Field(min_length=1)
    model: str = Field(min_length=1)
    correct: bool
    reason: str  # "ok" when correct; otherwise from the verifier's fixed vocabulary
    detail: str = ""
    cost_usd: float | None = Field(default=None, ge=0)


# --- parquet round trip -------------------------------------------------------

Record = TypeVar("Record", Example, Output, Label)

# Fields stored as JSON strings, per record type.
_JSON_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {
    Example: ("messages", "tools", "expected", "meta"),
    Output: ("raw", "calls", "usage"),
    Label: (),
}


def to_frame(records: Iterable[Record], kind: type[Record]) -> pd.DataFrame:
    json_fields = _JSON_FIELDS[kind]
    rows = []
    for r in records:
        d = r.model_dump(mode="json")
        for f in json_fields:
            d[f] = json.dumps(d[f], ensure_ascii=False, sort_keys=False)
        rows.append(d)
    return pd.DataFrame(rows, columns=list(kind.model_fields))


def from_frame(df: pd.DataFrame, kind: type[Record], *, source: str = "<frame>") -> list[Record]:
    missing = [f for f in kind.model_fields if f not in df.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing} for {kind.__name__}")
    return from_rows(df.to_dict(orient="records"), kind, source=source)


def from_rows(rows: Iterable[dict[str, Any]], kind: type[Record], *, source: str = "<rows>") -> list[Record]:
    """Records from row dicts (JSON fields as strings, nulls as None or NaN), row numbers in errors."""
    json_fields = _JSON_FIELDS[kind]
    fields = list(kind.model_fields)  # once: pydantic's class attribute is slow to read per row
    validate = kind.model_validate
    out: list[Record] = []
    for i, row in enumerate(rows):
        d = {}
        for k in fields:
            v = row[k]
            d[k] = json.loads(v) if k in json_fields else (None if _is_missing(v) else v)
        try:
            out.append(validate(d))
        except Exception as e:  # pydantic.ValidationError, but keep the row number
            raise ValueError(f"{source}: row {i}: invalid {kind.__name__}: {e}") from e
    return out


def _is_missing(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    return isinstance(v, float) and v != v  # NaN: a null in a float column


def write_records(path: str | Path, records: Iterable[Record], kind: type[Record]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    to_frame(records, kind).to_parquet(path, index=False)
    return path


def read_records(path: str | Path, kind: type[Record], *, models: Iterable[str] | None = None) -> list[Record]:
    """Records of a parquet file; `models`: only the rows whose `model` column is one of them."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (expected a {kind.__name__} parquet file)")
    import pyarrow.parquet as pq

    table = pq.read_table(path, filters=[("model", "in", sorted(set(models)))] if models is not None else None)
    missing = [f for f in kind.model_fields if f not in table.column_names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing} for {kind.__name__}")
    # Arrow's rows come with None for nulls and plain Python values: no pandas boxing per cell.
    return from_rows(table.select(list(kind.model_fields)).to_pylist(), kind, source=str(path))


def write_examples(path: str | Path, examples: Iterable[Example]) -> Path:
    return write_records(path, examples, Example)


def read_examples(path: str | Path) -> list[Example]:
    return read_records(path, Example)


def write_outputs(path: str | Path, outputs: Iterable[Output]) -> Path:
    return write_records(path, outputs, Output)


def read_outputs(path: str | Path, *, models: Iterable[str] | None = None) -> list[Output]:
    """Outputs of a parquet file, or only those of `models` (read with a filter: the rest is never decoded)."""
    return read_records(path, Output, models=models)


def write_labels(path: str | Path, labels: Iterable[Label]) -> Path:
    return write_records(path, labels, Label)


def read_labels(path: str | Path) -> list[Label]:
    return read_records(path, Label)


__all__ = [
    "Call",
    "Message",
    "Tool",
    "ExpectedArg",
    "ExpectedCall",
    "Expected",
    "Example",
    "Usage",
    "Output",
    "Label",
]
