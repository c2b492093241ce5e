"""NexusBench (Nexusflow): 14 multi-step tool-use benchmarks, one routing decision per episode.

    switchcraft ingest --source nexusbench      # ../shared/data/nexusbench_pool_outputs_2025-08/parquets

The recordings (`<Benchmark>_<stamp>_<provider>-<model>-OpenAIFC.parquet`, one per benchmark and model) hold
each episode's turns; every model of a benchmark saw the same episodes, in its own order. An episode is one
routing decision: the model chosen runs the whole episode (the agent-session case), so its Example is what
the router sees before the first call, the first turn's messages (a system turn where the benchmark has one,
then the user query) and the tools offered (`prompt_0`, OpenAI function-calling form).

Its label is the harness's verdict of the whole episode (`Final Accuracy`), never our verifier's: `expected`
is `any_call` only because an Example must say something, and `meta["labels"] = "harness"` says where
labels come from; the benchmark's own `ground_truth` (a call, a nested call, or a final value) is kept in
`meta["ground_truth"]` as recorded.

Ids: `nexusbench:<Benchmark>:<first 12 hex of the sha1 of prompt_0>`, stable whatever the file order; the
k-th repeat of one prompt in a benchmark (TMIHallucination asks 6 queries twice) gets `:<k>` appended, and
repeats are paired across models in file order. 1,124 episodes.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data.errors import DataError
from data.schema import Example, Expected, Message
from data.sources import ADAPTERS, IngestReport
from data.tools import tools_from_docs

SOURCE = "nexusbench"
FILE = re.compile(r"^(?P<benchmark>[A-Za-z0-9]+)_(?P<stamp>\d+)_(?P<model>.+?)-OpenAIFC\.parquet$")


def recording_files(root: str | Path) -> list[tuple[str, str, Path]]:
    """(benchmark, model, file) for every recording under `root`, sorted; a DataError if there is none."""
    root = Path(root)
    if not root.is_dir():
        raise DataError("no such folder of NexusBench recordings", path=root,
                        hint="point --path at nexusbench_pool_outputs_2025-08/parquets")
    out = [(m["benchmark"], m["model"], f) for f in sorted(root.glob("*.parquet")) if (m := FILE.match(f.name))]
    if not out:
        raise DataError("no <Benchmark>_<stamp>_<model>-OpenAIFC.parquet files", path=root)
    return sorted(out)


def episode_ids(benchmark: str, prompts: list[str]) -> list[str]:
    """The example id of each row, from its first prompt (see the module docstring)."""
    seen: Counter = Counter()
    ids = []
    for p in prompts:
        key = f"{SOURCE}:{benchmark}:{hashlib.sha1(p.encode()).hexdigest()[:12]}"
        ids.append(key if not seen[key] else f"{key}:{seen[key]}")
        seen[key] += 1
    return ids


def read_prompt(text: str, *, path: Path, row: int) -> dict[str, Any]:
    """`prompt_0` (a Python repr of `{messages, tools}`) as a dict."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
        raise DataError(f"not a Python literal: {e}", path=path, line=row + 1, field="prompt_0") from None
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        raise DataError("expected {'messages': [...], 'tools': [...]}", path=path, line=row + 1, field="prompt_0")
    return value


@ADAPTERS.register(SOURCE)
def read_nexusbench(location: str, report: IngestReport, benchmarks: list[str] | None = None) -> Iterator[Example]:
    import pyarrow.parquet as pq

    files: dict[str, list[Path]] = {}
    for benchmark, _, f in recording_files(location):
        files.setdefault(benchmark, []).append(f)
    for benchmark, fs in sorted(files.items()):
        if benchmarks and benchmark not in benchmarks:
            continue
        # Every file of a benchmark has the same episodes; some runs did not keep `ground_truth`.
        f = next((f for f in fs if "ground_truth" in pq.read_schema(f).names), fs[0])
        names = pq.read_schema(f).names
        cols = pq.read_table(f, columns=[c for c in ("prompt_0", "ground_truth") if c in names]).to_pydict()
        prompts = cols["prompt_0"]
        truths = cols.get("ground_truth") or [None] * len(prompts)
        for row, (eid, prompt, truth) in enumerate(zip(episode_ids(benchmark, prompts), prompts, truths)):
            p = read_prompt(prompt, path=f, row=row)
            try:
                tools = tools_from_docs(p.get("tools") or [])
            except (ValueError, KeyError, TypeError) as e:
                raise DataError(f"bad tool: {e}", path=f, line=row + 1, field="prompt_0.tools") from None
            messages = [Message(role=m["role"], content=m.get("content")) for m in p["messages"]]
            meta: dict[str, Any] = {"benchmark": benchmark, "labels": "harness"}
            if truth is not None:
                meta["ground_truth"] = truth
            yield Example(id=eid, source=SOURCE, category=benchmark, messages=messages, tools=tools,
                          expected=Expected.anything(), meta=meta)
