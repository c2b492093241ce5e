"""NexusBench (2025): 8 LLMs on 1,124 multi-step episodes; recordings → one `Output` and one harness `Label` per
(episode, model).

    switchcraft import-outputs --source nexusbench          # → outputs.parquet
    switchcraft label --pool configs/pools/nexusbench_2025.yaml --outputs ../shared/data/nexusbench_pool_outputs_2025-08/parquets
    from data.benchmarks.nexusbench import read_episodes, harness_labels
    episodes = read_episodes("../shared/data/nexusbench_pool_outputs_2025-08/parquets")
    labels = harness_labels(episodes, load_pool("configs/pools/nexusbench_2025.yaml"))

Recordings: `<root>/<Benchmark>_<stamp>_<model>-OpenAIFC.parquet` (`nexusbench_pool_outputs_2025-08/parquets/` under
the data root), one file per benchmark and model; example ids `nexusbench:<Benchmark>:<hash>`; imported by name
only. An episode is one routing decision (`data.sources.nexusbench`): the model runs every turn of it, so

- `usage` is the sum over every turn's `usage=CompletionUsage(…)`: prompt tokens as input, completion tokens
  as output (reasoning included, as the APIs count it), reasoning tokens apart where recorded; `latency_s`
  is None (the harness recorded none);
- `raw` is the first turn's assistant message as the API returned it (`{"content", "tool_calls"}`), and
  `calls` its tool calls (the first step, what an agreement check of two models could compare); a first turn
  in words is no call (a function-calling API returns calls as data);
- the label is the harness's verdict of the whole episode (`Final Accuracy`): `ok`, or `episode_failed`;
  cost = the pool's price × the summed usage.

An episode whose first request failed (`response_0` None, `result_0` "EXCEPTION: Max Retries Reached") is no
answer (`no_answer`, `data.decoders.is_no_answer`): labelled `no_answer`, never decoded, counted per model.
An episode whose later request failed ("Max Retries Reached" as a turn's result: 777 episodes, nearly all
DeepSeek-R1's and -V3's) was cut short by the provider, not judged on an answer: when the harness failed it,
the label is `no_answer` (still not correct, cost as recorded); when it passed it anyway, `ok`. Counted per
model in `EpisodeReport.later_errors`.
"""

from __future__ import annotations

import ast
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.benchmarks import register
from data.benchmarks.base import Benchmark, ImportReport, ResultFile
from data.decoders import NATIVE_TEXT, decode, is_no_answer, no_answer_error
from data.errors import DataError
from data.schema import Example, Label, Output, Usage
from data.sources.nexusbench import episode_ids, recording_files

_TURN = re.compile(r"^response_(\d+)$")
_USAGE = re.compile(r"\b(completion_tokens|prompt_tokens|reasoning_tokens)=(\d+)")
EPISODE_FAILED = "episode_failed"
HARNESS_LABELS = ("the NexusBench harness's verdict of the whole episode (`Final Accuracy`), not switchcraft's "
                  "verifier; an episode whose first request, or a later one the harness then failed, got no answer "
                  "is `no_answer`; cost: every turn's tokens at the pool's prices")


@dataclass
class Episode:
    """One (episode, model) of the recordings: its Output and the harness's verdict."""

    output: Output
    passed: bool
    turns: int
    interrupted: str | None = None  # "turn k: <result>" when a later request failed, else None


@dataclass
class EpisodeReport:
    outputs: Counter = field(default_factory=Counter)  # model -> episodes
    passed: Counter = field(default_factory=Counter)  # model -> episodes the harness passed
    no_answer: Counter = field(default_factory=Counter)  # model -> episodes with no first answer
    later_errors: Counter = field(default_factory=Counter)  # model -> episodes with a failed later turn
    no_usage: Counter = field(default_factory=Counter)  # model -> answered episodes with no usage recorded
    files: int = 0
    seconds: float = 0.0


def parse_response(text: str, *, path: Path, row: int, col: str) -> dict[str, Any]:
    """A recorded `ChatCompletion(…)` repr as nested dicts (each object's keyword arguments)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise DataError(f"not a ChatCompletion repr: {e.msg}", path=path, line=row + 1, field=col) from None
    return _value(node)


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Call):
        return {k.arg: _value(k.value) for k in node.keywords if k.arg}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {str(_value(k)): _value(v) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    return ast.unparse(node)


def turn_usage(text: str) -> tuple[int, int, int | None] | None:
    """(prompt, completion, reasoning or None) tokens of one turn's response, or None if it records no usage."""
    at = text.rfind("usage=CompletionUsage(")
    if at < 0:
        return None
    found = {k: int(v) for k, v in _USAGE.findall(text, at)}
    if "prompt_tokens" not in found or "completion_tokens" not in found:
        return None
    return found["prompt_tokens"], found["completion_tokens"], found.get("reasoning_tokens")


def first_message(response: dict[str, Any]) -> dict[str, Any]:
    """The assistant message of a parsed response, in OpenAI JSON form: content and tool calls."""
    choices = response.get("choices") or [{}]
    msg = choices[0].get("message") or {}
    calls = [{"type": "function", "function": {"name": (c.get("function") or {}).get("name"),
                                                "arguments": (c.get("function") or {}).get("arguments")}}
             for c in msg.get("tool_calls") or []]
    return {"content": msg.get("content"), "tool_calls": calls}


def read_episodes(root: str | Path, *, models: list[str] | None = None, report: EpisodeReport | None = None,
                  examples: dict | None = None) -> list[Episode]:
    """Every (episode, model) of the recordings under `root`; `models` keeps only those recordings;
    `examples` (id → Example) gives the tools that decoded names map back to."""
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    report = report if report is not None else EpisodeReport()
    files = recording_files(root)
    if models:
        missing = set(models) - {m for _, m, _ in files}
        if missing:
            known = ", ".join(sorted({m for _, m, _ in files}))
            raise DataError(f"no NexusBench recordings of {sorted(missing)}; known: {known}", path=root)
        files = [f for f in files if f[1] in set(models)]
    out: list[Episode] = []
    for benchmark, model, f in files:
        report.files += 1
        rows = pq.read_table(f).to_pylist()
        for row, eid in zip(rows, episode_ids(benchmark, [r["prompt_0"] for r in rows])):
            ep = _episode(row, eid, model, f, len(out), examples)
            report.outputs[model] += 1
            report.passed[model] += ep.passed
            if ep.output.calls is None and is_no_answer(ep.output.decode_error):
                report.no_answer[model] += 1
            elif not ep.output.usage.known:
                report.no_usage[model] += 1
            if ep.interrupted:
                report.later_errors[model] += 1
            out.append(ep)
    report.seconds += time.perf_counter() - t0
    return out


def _turns_of(row: dict[str, Any]) -> int:
    return 1 + max((int(m.group(1)) for k in row if (m := _TURN.match(k))), default=0)


def _recorded(v: Any) -> bool:
    return v is not None and v != "None"


def _failed(result: Any) -> bool:
    """A turn whose request failed: the harness records "Max Retries Reached" (or "EXCEPTION: …") as its result."""
    return isinstance(result, str) and (result.startswith("EXCEPTION") or result.startswith("Max Retries Reached"))


def _episode(row: dict[str, Any], eid: str, model: str, path: Path, n: int, examples: dict | None) -> Episode:
    verdict = row.get("Final Accuracy")
    if verdict not in ("True", "False"):
        raise DataError(f"expected 'True' or 'False', got {verdict!r}", path=path, line=n + 1, field="Final Accuracy")
    passed = verdict == "True"
    first = row.get("response_0")
    if not _recorded(first):
        why = row.get("result_0") if _recorded(row.get("result_0")) else "no response recorded"
        out = Output(example_id=eid, model=model, raw=None, decode_error=no_answer_error(str(why)))
        return Episode(out, passed, 0)
    tin = tout = 0
    reasoning: int | None = None
    turns = 0
    for i in range(_turns_of(row)):
        text = row.get(f"response_{i}")
        if not _recorded(text):
            continue
        turns += 1
        u = turn_usage(text)
        if u is None:
            tin = tout = None  # one turn unmeasured: the episode's cost is unknown, never undercounted
            break
        tin, tout = tin + u[0], tout + u[1]
        if u[2] is not None:
            reasoning = (reasoning or 0) + u[2]
    failed = next((i for i in range(1, _turns_of(row)) if _failed(row.get(f"result_{i}"))), None)
    interrupted = None if failed is None else f"turn {failed}: {row[f'result_{failed}']}"
    message = first_message(parse_response(first, path=path, row=n, col="response_0"))
    if message["tool_calls"]:
        ex = (examples or {}).get(eid)
        res = decode({"tool_calls": message["tool_calls"]}, ex.tools if ex else None)
        calls, error, decoder = res.calls, res.error, res.decoder
    else:
        calls, error, decoder = None, NATIVE_TEXT, None
    usage = Usage(input_tokens=tin, output_tokens=tout, reasoning_tokens=reasoning if tin is not None else None)
    out = Output(example_id=eid, model=model, raw=message, calls=calls, decode_error=error, decoder=decoder, usage=usage)
    return Episode(out, passed, turns, interrupted)


def harness_labels(episodes: list[Episode], pool) -> list[Label]:
    """One Label per episode of a pool model: the harness's verdict, `no_answer` for an episode with no first
    answer or one a failed request cut short (unless the harness passed it), cost from the pool's price of the
    summed usage."""
    by_recording = {m.recording: m for m in pool.models} | {m.name: m for m in pool.models}
    labels = []
    for ep in episodes:
        pm = by_recording.get(ep.output.model)
        if pm is None:
            continue
        o = ep.output
        if o.calls is None and is_no_answer(o.decode_error):
            correct, reason, detail = False, "no_answer", o.decode_error
        elif ep.interrupted and not ep.passed:
            correct, reason, detail = False, "no_answer", f"cut short at {ep.interrupted}"
        else:
            correct, reason, detail = ep.passed, "ok" if ep.passed else EPISODE_FAILED, f"{ep.turns} turns"
        labels.append(Label(example_id=o.example_id, model=pm.name, correct=correct, reason=reason, detail=detail,
                            cost_usd=pm.prices.output_cost_usd(o)))
    return labels


def folder_labels(path: str | Path, pool, *, pool_path: str | Path | None = None) -> list[Label]:
    """Harness labels of every pool model's episodes under `path` (what `switchcraft label` writes for a
    NexusBench folder). Refused, naming the models, when a pool model has no recordings there or none of its
    episodes records the usage its price needs."""
    recorded = {m for _, m, _ in recording_files(path)}
    missing = [m.recording for m in pool.models if m.recording not in recorded]
    if missing:
        raise DataError(f"no NexusBench recordings of pool model(s) {missing}; recorded: {', '.join(sorted(recorded))}",
                        path=pool_path or path, hint="leave them out of the pool, or point --outputs at their recordings")
    episodes = read_episodes(path, models=[m.recording for m in pool.models])
    labels = harness_labels(episodes, pool)
    costed = {lab.model for lab in labels if lab.cost_usd is not None}
    uncosted = [m.name for m in pool.models if m.name not in costed]
    if uncosted:
        raise DataError(f"no episode of {uncosted} could be costed from its recordings", path=pool_path or path,
                        hint="NexusBench records token usage, not latency: price these models per token")
    return labels


@register
class NexusBench(Benchmark):
    name = "nexusbench"
    source = "nexusbench"
    recordings = "nexusbench_pool_outputs_2025-08/parquets"
    layout = "<Benchmark>_<stamp>_<model>-OpenAIFC.parquet"
    harness = HARNESS_LABELS

    def holds(self, root: Path) -> bool:
        return any(root.glob("*-OpenAIFC.parquet"))

    def result_files(self, root: Path) -> list[ResultFile]:
        return [(model, benchmark, f) for benchmark, model, f in recording_files(root)]

    def read_outputs(self, root: Path, *, examples: dict[str, Example] | None, models: list[str] | None,
                     report: ImportReport, progress: bool = False, workers: int | None = None) -> list[Output]:
        outputs = []
        episodes = EpisodeReport()
        for ep in read_episodes(root, models=models, examples=examples, report=episodes):
            if examples is not None and ep.output.example_id not in examples:
                report.skipped[(ep.output.model, "no example for id")] += 1
                continue
            report.add(ep.output)
            outputs.append(ep.output)
        report.files += episodes.files
        return outputs

    def recorded_usage(self, root: Path, models: set[str], done: set[str]) -> Iterator[tuple[str, bool, bool]]:
        # Usage summed over an episode's turns; the harness recorded no latency.
        for ep in read_episodes(root, models=sorted(models & {m for _, m, _ in recording_files(root)})):
            yield ep.output.model, ep.output.usage.known, False

    def harness_labels(self, root: Path, pool: Any, *, pool_path: str | Path | None = None) -> list[Label]:
        return folder_labels(root, pool, pool_path=pool_path)
