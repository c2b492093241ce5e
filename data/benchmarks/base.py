"""What a benchmark with recorded model outputs is: the base class every adapter in `data/benchmarks/` fills in.

    from data.benchmarks import get
    bench = get("bfcl_v3")
    root = bench.recordings_path(load_data_config())   # outputs.bfcl_v3 in configs/data.yaml, else its folder
    files = bench.result_files(root)                    # (model, category, file), sorted
    outputs = bench.read_outputs(root, examples=examples, models=None, report=ImportReport())

A benchmark knows its questions (the ingest source in `data/sources/` it names), where its recordings lie under the
data root and how to recognise them, how to read them into decoded `Output`s, what a recorded row says about
usage (for `data.pool.check_costable`), and, when its own harness judged the answers, those labels.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from data.decoders import is_no_answer
from data.errors import DataError
from data.schema import Example, Label, Output

# (model, category, file) of one result file: what `result_files` lists.
ResultFile = tuple[str, str, Path]


@dataclass
class ImportReport:
    """What was imported, per model, and what was not, by reason."""

    outputs: Counter = field(default_factory=Counter)  # model -> outputs
    decoded: Counter = field(default_factory=Counter)  # model -> outputs with calls
    by_decoder: Counter = field(default_factory=Counter)  # decoder (or error kind) -> outputs
    no_answer: Counter = field(default_factory=Counter)  # model -> outputs that are inference errors
    skipped: Counter = field(default_factory=Counter)  # (model, reason) -> rows
    files: int = 0
    seconds: float = 0.0

    def add(self, out: Output) -> None:
        self.outputs[out.model] += 1
        if out.calls is not None:
            self.decoded[out.model] += 1
            self.by_decoder[out.decoder] += 1
        else:
            self.by_decoder[(out.decode_error or "").split(":", 1)[0]] += 1
            if is_no_answer(out.decode_error):
                self.no_answer[out.model] += 1

    def total(self) -> int:
        return sum(self.outputs.values())

    def decode_rate(self, model: str | None = None) -> float:
        n = self.outputs[model] if model else self.total()
        d = self.decoded[model] if model else sum(self.decoded.values())
        return d / n if n else 0.0


class Benchmark(ABC):
    """One benchmark with recordings. Subclass it (or `data.benchmarks.lines.ResultLines` for BFCL-style JSON
    result lines) in a module of `data/benchmarks/` and register an instance with `@register`."""

    name: ClassVar[str]  # registry key, example-id prefix, a pool's `benchmark:`, `outputs.<name>` in data.yaml
    source: ClassVar[str]  # its questions: the ingest source (data/sources/) that reads them
    recordings: ClassVar[str]  # its recordings' folder under the data root (`outputs.<name>` overrides it)
    layout: ClassVar[str]  # what its recordings look like in that folder, for error messages
    in_all: ClassVar[bool] = False  # imported by `switchcraft import-outputs --source all`
    price_file: ClassVar[str | None] = None  # data.yaml `outputs:` key of a price file suggesting prices
    earlier_run: ClassVar[str | None] = None  # data.yaml `outputs:` key of an earlier run (test–retest)
    harness: ClassVar[str | None] = None  # its harness labels the answers: what such a label is; None: our verifier

    def recordings_path(self, cfg: Any) -> str:
        """Where its recordings are, for a data config: `outputs.<name>` when given, else its folder under
        the data root."""
        return cfg.output_path(self.name)

    def examples(self, cfg: Any, report: Any = None) -> list[Example]:
        """Its questions as Examples, read by its ingest source from the config's `sources.<source>`."""
        from data.sources import read_source

        where = cfg.source_path(self.source)
        if not where or not Path(where).exists():
            raise DataError(f"no questions of {self.name} at {where}", field=f"sources.{self.source}",
                            hint=f"give sources.{self.source} in the data config")
        return read_source(self.source, where, report)

    @abstractmethod
    def holds(self, root: Path) -> bool:
        """Whether the folder `root` holds recordings in this benchmark's layout (cheap: a glob)."""

    @abstractmethod
    def result_files(self, root: Path) -> list[ResultFile]:
        """(model, category, file) for every result file under `root`, sorted."""

    @abstractmethod
    def read_outputs(self, root: Path, *, examples: dict[str, Example] | None, models: list[str] | None,
                     report: ImportReport, progress: bool = False, workers: int | None = None) -> list[Output]:
        """Every recorded answer under `root` as a decoded Output (see `data.recorded.import_recorded`)."""

    @abstractmethod
    def recorded_usage(self, root: Path, models: set[str], done: set[str]) -> Iterator[tuple[str, bool, bool]]:
        """(model, has token counts, has latency) per recorded row of `models`; a model in `done` (filled by
        the caller as it goes) may be read no further."""

    def harness_labels(self, root: Path, pool: Any, *, pool_path: str | Path | None = None) -> list[Label]:
        """The harness's label of every pool model's recorded answer (only where `harness` is set)."""
        raise DataError(f"{self.name} is labelled by switchcraft's verifier, not by its harness", path=root)
