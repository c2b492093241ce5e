"""What the replay server answers with: recorded outputs, and which example a request is about.

Recordings come from an `outputs.parquet` (Output records) or a directory of
BFCL result files (`<dir>/<model>/<category>.jsonl`, read by
`data.recorded.import_recorded`). Only raw and usage are kept.

    from data.replay.recordings import read_recordings
    recs = read_recordings("../shared/data/bfcl_v1_pool_outputs_2024-08-11", models=["gpt-4-0613"])
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.errors import DataError
from data.pool_runner.request import openai_function_name
from data.schema import Example, Usage, read_outputs


@dataclass(frozen=True)
class Recording:
    raw: Any
    usage: Usage


Recordings = dict[str, dict[str, Recording]]  # model -> example id -> recording


def read_recordings(path: str | Path, *, models: Iterable[str] | None = None) -> Recordings:
    """Recordings by model and example id (BFCL ids get their source prefix, `bfcl_v1:`)."""
    path = Path(path)
    wanted = set(models) if models is not None else None
    out: Recordings = {}
    if path.is_file() and path.suffix == ".parquet":
        for o in read_outputs(path):
            if wanted is None or o.model in wanted:
                out.setdefault(o.model, {})[o.example_id] = Recording(o.raw, o.usage)
    elif path.is_dir():
        # The project's importer: same ids, same raw, same "0 tokens means not measured" rule.
        from data.recorded import import_recorded

        for o in import_recorded(path, models=sorted(wanted) if wanted else None, progress=False):
            out.setdefault(o.model, {})[o.example_id] = Recording(o.raw, o.usage)
    else:
        raise DataError(
            "recordings not found",
            path=path,
            hint="give an outputs.parquet or a BFCL result directory",
        )
    if wanted is not None and (missing := sorted(wanted - set(out))):
        raise DataError(
            f"no recordings for model(s) {missing}",
            path=path,
            hint=f"recorded: {sorted(out)[:10]}...",
        )
    return out


class ExampleIndex:
    """Finds the example a chat request is about: by `metadata.example_id`, else by question text.

    99 BFCL v1 questions appear twice (a `simple` query reused in `multiple`
    with extra functions). Those are told apart by the functions the request
    offers: of the candidates whose every function name (as given, or made
    OpenAI-legal) appears in the request, the one with the most functions wins.
    """

    def __init__(self, examples: Iterable[Example]) -> None:
        self.ids: set[str] = set()
        self._by_question: dict[str, list[tuple[str, list[set[str]]]]] = {}
        for ex in examples:
            self.ids.add(ex.id)
            names = [{t.name, openai_function_name(t.name)} for t in ex.tools]
            self._by_question.setdefault(ex.question, []).append((ex.id, names))

    def match(self, body: dict[str, Any]) -> str | None:
        meta = body.get("metadata") or {}
        if isinstance(meta, dict) and meta.get("example_id") in self.ids:
            return meta["example_id"]
        question = next(
            (
                m.get("content")
                for m in reversed(body.get("messages") or [])
                if isinstance(m, dict)
                and m.get("role") == "user"
                and isinstance(m.get("content"), str)
            ),
            None,
        )
        candidates = self._by_question.get(question or "", [])
        if len(candidates) <= 1:
            return candidates[0][0] if candidates else None
        text = json.dumps(body.get("tools") or []) + json.dumps(body.get("messages") or [])
        fits = [
            (len(names), ex_id)
            for ex_id, names in candidates
            if all(any(n in text for n in ns) for ns in names)
        ]
        fits.sort(reverse=True)
        if not fits or (len(fits) > 1 and fits[0][0] == fits[1][0]):
            return None
        return fits[0][1]
