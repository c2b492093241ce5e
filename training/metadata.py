"""Numeric metadata of the *unpacked* request, and its scaling.

    raw = request_metadata(example.messages, example.tools, tokenizer)   # dict name -> float
    scaler = MetadataScaler.fit(rows)       # rows: [n, len(FEATURES)] raw values
    x = scaler.transform(rows)              # log1p on counts, then standardised

Packing cuts; these numbers say how much there was (a 6,000-token request with
40 tools is harder than what fits in the window shows). The feature list and
the scaling are written to router.json, so serving computes the same vector.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.packing import as_messages, as_tools, encode, last_user_index

# (name, log1p-scaled?) — booleans stay 0/1 before standardising.
FEATURES: tuple[tuple[str, bool], ...] = (
    ("total_tokens", True),
    ("user_tokens", True),
    ("n_tools", True),
    ("n_turns", True),
    ("n_params", True),
    ("n_required_params", True),
    ("n_enum_params", True),
    ("n_nested_params", True),
    ("n_prior_calls", True),
    ("has_tool_results", False),
    ("has_system", False),
)
FEATURE_NAMES = [name for name, _ in FEATURES]


def request_metadata(messages: list[Any], tools: list[Any] | None, tokenizer) -> dict[str, float]:
    messages, tools = as_messages(messages), as_tools(tools)
    ui = last_user_index(messages)
    # The whole request as a model would see it: every turn plus the full tool schemas.
    full_text = "\n".join(
        [json.dumps(m.model_dump(exclude_none=True), ensure_ascii=False) for m in messages]
        + [json.dumps(t.original or t.model_dump(exclude={"original"}), ensure_ascii=False) for t in tools]
    )
    n_params = n_required = n_enum = n_nested = 0
    for t in tools:
        props = (t.parameters or {}).get("properties") or {}
        n_params += len(props)
        n_required += len(set((t.parameters or {}).get("required") or []) & set(props))
        for schema in props.values():
            schema = schema if isinstance(schema, dict) else {}
            n_enum += bool(schema.get("enum"))
            n_nested += schema.get("type") in ("object", "array")
    return {
        "total_tokens": float(len(encode(tokenizer, full_text))),
        "user_tokens": float(len(encode(tokenizer, messages[ui].content or ""))) if ui is not None else 0.0,
        "n_tools": float(len(tools)),
        "n_turns": float(len(messages)),
        "n_params": float(n_params),
        "n_required_params": float(n_required),
        "n_enum_params": float(n_enum),
        "n_nested_params": float(n_nested),
        "n_prior_calls": float(sum(len(m.tool_calls) for m in messages)),
        "has_tool_results": float(any(m.role == "tool" for m in messages)),
        "has_system": float(any(m.role == "system" for m in messages)),
    }


def metadata_row(meta: dict[str, float]) -> list[float]:
    return [meta[name] for name in FEATURE_NAMES]


@dataclass
class MetadataScaler:
    """log1p on counts, then (x - mean) / std with mean and std from the training rows."""

    names: list[str]
    log1p: list[bool]
    mean: list[float]
    std: list[float]

    @classmethod
    def fit(cls, rows: np.ndarray) -> MetadataScaler:
        logged = [flag for _, flag in FEATURES]
        z = _log(np.asarray(rows, dtype=np.float64), logged)
        std = z.std(axis=0)
        # A constant feature (e.g. no request has a system turn) scales by 1, not by 0.
        std = np.where(std < 1e-6, 1.0, std)
        return cls(list(FEATURE_NAMES), logged, z.mean(axis=0).tolist(), std.tolist())

    def transform(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, len(self.names))
        z = _log(rows, self.log1p)
        return ((z - np.asarray(self.mean)) / np.asarray(self.std)).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        return {"features": self.names, "log1p": self.log1p, "mean": self.mean, "std": self.std}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MetadataScaler:
        if list(d["features"]) != FEATURE_NAMES:
            raise ValueError(
                f"router.json lists metadata features {d['features']}, this code computes {FEATURE_NAMES}; "
                "retrain the router with this version"
            )
        return cls(list(d["features"]), list(d["log1p"]), list(d["mean"]), list(d["std"]))


def _log(rows: np.ndarray, logged: list[bool]) -> np.ndarray:
    out = rows.copy()
    mask = np.asarray(logged, dtype=bool)
    out[:, mask] = np.log1p(np.clip(out[:, mask], 0, None))
    return out
