"""Typed YAML configs: read a file, validate it with a pydantic model, and say
exactly where it is wrong (file, line, key) when it is.

    cfg = load_yaml_model("configs/pool.yaml", Pool, hint="run from the repository root or pass --pool")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from data.errors import DataError

M = TypeVar("M", bound=BaseModel)


def read_yaml(path: str | Path, *, hint: str | None = None) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise DataError("config file not found", path=path, hint=hint)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise DataError(f"invalid YAML: {e}", path=path, line=mark.line + 1 if mark else None) from None
    if not isinstance(raw, dict):
        raise DataError(f"expected a mapping at the top, got {type(raw).__name__}", path=path)
    return raw


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`a.b=value` sets raw["a"]["b"]; the value is read as YAML (`3`, `true`, `[a, b]`, `null`)."""
    out = dict(raw)
    for item in overrides:
        if "=" not in item:
            raise DataError(f"override {item!r} is not key=value", path="<command line>", hint="e.g. mode=finetune or retrieval.max_intents=1")
        key, _, text = item.partition("=")
        try:
            value = yaml.safe_load(text) if text != "" else None
        except yaml.YAMLError:
            value = text
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            child = node.get(p)
            node[p] = dict(child) if isinstance(child, dict) else {}
            node = node[p]
        node[parts[-1]] = value
    return out


def validate_model(path: str | Path, raw: dict[str, Any], model: type[M], overrides: list[str] | None = None, *,
                   hint_of: Callable[[dict], str | None] | None = None) -> M:
    """`model.model_validate(raw)`, its first error turned into a DataError naming file, line and key — or, where
    the key was set by one of `overrides` (`apply_overrides`'s `a.b=value`), that override on the command line.
    `hint_of(error)`: what would fix it (pydantic's error dict), if anything."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or None
        fix = hint_of(err) if hint_of else None
        for item in overrides or []:
            key = item.partition("=")[0].strip()
            if field and (field == key or field.startswith(key + ".") or key.startswith(field + ".")):
                hint = "; ".join(h for h in (fix, f"the override {item!r}") if h)
                raise DataError(err["msg"], path="<command line>", field=field, hint=hint) from None
        line = line_of(path, err["loc"]) if err["loc"] else None  # a whole-model check has no one line
        raise DataError(err["msg"], path=path, line=line, field=field, hint=fix) from None


def load_yaml_model(path: str | Path, model: type[M], *, hint: str | None = None) -> M:
    return validate_model(path, read_yaml(path, hint=hint), model)


def line_of(path: str | Path, loc: tuple | list) -> int | None:
    """1-based line of a key path (`models.0.api_key_env`) in a YAML file, as near as it exists."""
    try:
        node = yaml.compose(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = [v for k, v in node.value if k.value == str(key)]
            if not match:
                return node.start_mark.line + 1
            node = match[0]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
    return node.start_mark.line + 1 if node is not None else None
