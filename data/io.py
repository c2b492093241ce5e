"""Reading source files: JSON Lines or JSON arrays, with line numbers for errors,
and Hugging Face hub ids through `datasets` when the path is not a local file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data.errors import DataError

# "owner/name" or "owner/name:split" — what a hub dataset id looks like.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?$")


def iter_json_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) from a JSON Lines file or a JSON array file.

    BFCL's ".json" files are in fact JSON Lines; some files are one JSON
    array, or pretty-printed objects one after another. A malformed line raises a DataError naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        raise DataError("no such file", path=path)
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise DataError(f"array item {i} is {type(row).__name__}, not an object", path=path)
            yield i + 1, row
        return
    if stripped.split("\n", 1)[0].strip() == "{":
        # One pretty-printed object per file, or several concatenated.
        dec = json.JSONDecoder()
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                return
            lineno = text.count("\n", 0, pos) + 1
            try:
                obj, pos = dec.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                raise DataError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
            if not isinstance(obj, dict):
                raise DataError(f"value is {type(obj).__name__}, not an object", path=path, line=lineno)
            yield lineno, obj
    yield from _jsonl_objects(text.splitlines(), path)


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON Lines file, streamed; a bad line is a DataError naming it."""
    with open(path, encoding="utf-8") as fh:
        yield from _jsonl_objects(fh, path)


def _jsonl_objects(lines, path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"invalid JSON at column {e.colno}: {e.msg}", path=path, line=lineno) from None
        if not isinstance(obj, dict):
            raise DataError(f"line is a {type(obj).__name__}, not a JSON object", path=path, line=lineno)
        yield lineno, obj


def is_hub_id(location: str) -> bool:
    return not Path(location).exists() and bool(_HUB_ID.match(location))


def iter_hub_rows(hub_id: str) -> Iterator[tuple[int, dict[str, Any]]]:  # pragma: no cover - needs network
    """Rows of a Hugging Face hub dataset ("owner/name[:split]", split defaults to train)."""
    from datasets import load_dataset

    name, _, split = hub_id.partition(":")
    try:
        ds = load_dataset(name, split=split or "train")
    except Exception as e:
        raise DataError(
            f"could not load hub dataset {name!r}: {e}",
            hint="this machine may have no network; pass a local file path instead",
        ) from None
    for i, row in enumerate(ds):
        yield i + 1, dict(row)


def iter_rows(location: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Local file rows, or hub dataset rows when `location` is a hub id and no such file exists."""
    loc = str(location)
    if is_hub_id(loc):
        yield from iter_hub_rows(loc)
    else:
        yield from iter_json_rows(loc)


def local_dir(location: str | Path) -> Path:
    """A local folder, or a hub dataset repository's files ("owner/name") downloaded into the
    Hugging Face cache, for sources whose layout is a folder of files (BFCL, ConFETTI)."""
    loc = str(location)
    if not is_hub_id(loc):
        return Path(loc)
    return _hub_snapshot(loc.partition(":")[0])  # pragma: no cover - needs network


def _hub_snapshot(repo_id: str) -> Path:  # pragma: no cover - needs network
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, repo_type="dataset"))
    except Exception as e:
        raise DataError(
            f"could not download hub dataset {repo_id!r}: {e}",
            hint="this machine may have no network; pass a local folder instead",
        ) from None


def parse_json_field(value: Any, *, path: str | Path, line: int, field: str) -> Any:
    """A field that holds JSON as a string (xLAM, Glaive): parse it, or say where it broke."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise DataError(f"field holds invalid JSON ({e.msg} at char {e.pos})", path=path, line=line, field=field) from None
