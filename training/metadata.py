"""Numeric metadata of the *unpacked* request, and its scaling.

    raw = request_metadata(example.messages, example.tools, tokenizer)   # dict name -> float
    scaler = MetadataScaler.fit(rows)       # rows: [n, len(FEATURES)] raw values
    x = scaler.transform(rows)              # log1p on counts, then standardised

Packing cuts; these numbers say how much there was (a 6,000-token request with
40 tools is harder than what fits in the window shows). They also spell out
structure the frozen encoder's mean-pooled vector blurs: Java/JavaScript-typed
schemas, how well the best tool fits the last user turn (relevance), and cues
that the question asks for several calls at once (numbers, conjunctions,
commas). All are cheap to compute at serving time from the request alone.
The feature list and the scaling are written to router.json, so serving
computes the same vector.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from data.tools import json_type
from training.packing import as_messages, as_tools, encode, last_user_index
from training.signatures import relevance, words

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
    # Structure of the offered tools and of the question: what tells BFCL's categories apart
    # (Java/JavaScript schemas, several tools, parallel asks, tools that do not fit the question).
    ("typed_lang_param_share", False),  # parameters typed String, HashMap, long, IResultSetController, ...
    ("any_type_param_share", False),  # parameters with no type constraint ("any", or none given)
    ("max_tool_params", True),
    ("n_array_params", True),
    ("best_tool_overlap", True),  # content words the best-matching tool shares with the last user turn
    ("best_name_overlap", False),  # share of the best-matching tool name's words found in the last user turn
    ("n_tools_named", True),  # tools whose name shares a word with the last user turn
    ("n_numbers", True),  # in the last user turn, as are the next five
    ("n_conjunctions", True),
    ("n_commas", True),
    ("n_question_marks", True),
    ("n_quoted", True),
    ("has_code_identifier", False),  # camelCase or dotted.name
)
FEATURE_NAMES = [name for name, _ in FEATURES]

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*")
_CONJUNCTION = re.compile(r"\b(?:and|also|respectively|then|both|each|as well as|plus|another|additionally)\b", re.IGNORECASE)
_QUOTE = re.compile(r"[`'\"]")
_IDENTIFIER = re.compile(r"[a-z][A-Z]|[A-Za-z]\.[A-Za-z]")
# Lower-case names that are a typed language's, not Python's or JSON Schema's.
_TYPED_LANG = frozenset(["long", "short", "byte", "char", "double", "bigint"])


def _original_type(schema: Any) -> str:
    """The source's type name for a parameter (`x-original-type` where the schema kept one); "any" if none."""
    if not isinstance(schema, dict):
        return "any"
    t = schema.get("x-original-type", schema.get("type"))
    if isinstance(t, list):
        t = next((x for x in t if isinstance(x, str) and x not in ("null", "")), "any")
    return t if isinstance(t, str) and t else "any"


def _typed_lang(type_name: str) -> bool:
    """Java/JavaScript-style: capitalised (String, HashMap), lower-case Java primitives, or unknown names."""
    return type_name[:1].isupper() or type_name in _TYPED_LANG or json_type(type_name) is None


def request_metadata(messages: list[Any], tools: list[Any] | None, tokenizer) -> dict[str, float]:
    messages, tools = as_messages(messages), as_tools(tools)
    ui = last_user_index(messages)
    # The whole request as a model would see it: every turn plus the full tool schemas.
    full_text = "\n".join(
        [json.dumps(m.model_dump(exclude_none=True), ensure_ascii=False) for m in messages]
        + [json.dumps(t.original or t.model_dump(exclude={"original"}), ensure_ascii=False) for t in tools]
    )
    question = (messages[ui].content or "") if ui is not None else ""
    question_words = words(question)
    n_params = n_required = n_enum = n_nested = n_array = n_typed_lang = n_any = 0
    max_params = best_overlap = n_named = 0
    best_name = 0.0
    for t in tools:
        props = (t.parameters or {}).get("properties") or {}
        n_params += len(props)
        max_params = max(max_params, len(props))
        n_required += len(set((t.parameters or {}).get("required") or []) & set(props))
        for schema in props.values():
            original = _original_type(schema)
            n_typed_lang += original != "any" and _typed_lang(original)
            n_any += original == "any"
            schema = schema if isinstance(schema, dict) else {}
            n_enum += bool(schema.get("enum"))
            n_nested += schema.get("type") in ("object", "array")
            n_array += schema.get("type") == "array"
        best_overlap = max(best_overlap, relevance(t, question_words))
        name_words = words(t.name)
        shared = len(name_words & question_words)
        n_named += shared > 0
        best_name = max(best_name, shared / len(name_words) if name_words else 0.0)
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
        "typed_lang_param_share": n_typed_lang / n_params if n_params else 0.0,
        "any_type_param_share": n_any / n_params if n_params else 0.0,
        "max_tool_params": float(max_params),
        "n_array_params": float(n_array),
        "best_tool_overlap": float(best_overlap),
        "best_name_overlap": float(best_name),
        "n_tools_named": float(n_named),
        "n_numbers": float(len(_NUMBER.findall(question))),
        "n_conjunctions": float(len(_CONJUNCTION.findall(question))),
        "n_commas": float(question.count(",")),
        "n_question_marks": float(question.count("?")),
        "n_quoted": float(len(_QUOTE.findall(question))),
        "has_code_identifier": float(bool(_IDENTIFIER.search(question))),
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
