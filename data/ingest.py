"""Ingestion: every configured source → one `examples.parquet`.

    switchcraft ingest --all
    switchcraft ingest --source bfcl_v1 --path ../shared/data/bfcl_v1
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.config import DataConfig
from data.errors import SourceUnavailable
from data.schema import Example, write_examples
from data.sources import IngestReport, load_adapters


@dataclass
class IngestResult:
    examples: list[Example]
    report: IngestReport
    unavailable: dict[str, str] = field(default_factory=dict)  # source -> why
    seconds: float = 0.0
    path: Path | None = None


def ingest_source(name: str, location: str, report: IngestReport, **options: Any) -> list[Example]:
    adapter = load_adapters().get(name)
    examples = []
    seen: set[str] = set()
    for ex in adapter(location, report, **options):
        if ex.id in seen:
            # Two rows with one id would silently shadow each other downstream.
            report.skip(name, "duplicate id")
            continue
        seen.add(ex.id)
        report.add(ex)
        examples.append(ex)
    return examples


def ingest(
    cfg: DataConfig,
    sources: list[str] | None = None,
    *,
    out: str | Path | None = None,
    path_overrides: dict[str, str] | None = None,
    options: dict[str, dict[str, Any]] | None = None,
) -> IngestResult:
    """Ingest the named sources (default: every enabled source in the config)."""
    t0 = time.perf_counter()
    names = sources or [n for n, s in cfg.sources.items() if s.enabled]
    report = IngestReport()
    result = IngestResult(examples=[], report=report)
    for name in names:
        load_adapters().get(name)  # unknown source: fail before reading anything
        location = (path_overrides or {}).get(name) or cfg.source_path(name)
        opts = dict(cfg.sources[name].options) if name in cfg.sources else {}
        opts.update((options or {}).get(name, {}))
        try:
            if not location:
                raise SourceUnavailable(f"no path configured for source {name!r}", hint="give --path or set it in configs/data.yaml")
            result.examples.extend(ingest_source(name, location, report, **opts))
        except SourceUnavailable as e:
            if sources:  # asked for by name: that is an error
                raise
            result.unavailable[name] = str(e)
    result.seconds = time.perf_counter() - t0
    if out is not None:
        result.path = write_examples(out, result.examples)
    return result
