"""BFCL v3, the 13 single-turn categories the 2025 pool run was scored against.

    switchcraft ingest --source bfcl_v3        # ../shared/data/bfcl_v3_pool_outputs_2025-08/data (configs/data.yaml)
    switchcraft ingest --source bfcl_v3 --path DIR   # any BFCL v3 release's data/ folder (or the run folder above it)

Files: `BFCL_v3_<category>.json` (JSON Lines) and `possible_answer/BFCL_v3_<category>.json`, read by the
BFCL v3/v4 reader (`data.sources.bfcl_v4.read_bfcl`): simple 400, multiple 200, parallel 200,
parallel_multiple 200, irrelevance 240, java 100, javascript 50, live_simple 258, live_multiple 1,053,
live_parallel 16, live_parallel_multiple 24, live_irrelevance 882, live_relevance 18 (3,641). `irrelevance`
and `live_irrelevance` expect no call, `live_relevance` any call to an offered tool. Ids are `bfcl_v3:<id>`.

The non-live ids (`simple_0`, …) are the BFCL v1 questions with v3's revised answers: a version of their
own (`bfcl_v3:simple_0`, never `bfcl_v1:simple_0`), labelled against v3's answers only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from data.errors import DataError
from data.io import local_dir
from data.schema import Example
from data.sources import ADAPTERS, IngestReport
from data.sources.bfcl_v4 import read_bfcl

SOURCE = "bfcl_v3"


@ADAPTERS.register(SOURCE)
def read_bfcl_v3(location: str, report: IngestReport, **options) -> Iterator[Example]:
    root = local_dir(location)
    # The shared run folder keeps its questions in data/, beside outputs/: accept either.
    if not any(root.glob("BFCL_v3_*.json")) and any(Path(root, "data").glob("BFCL_v3_*.json")):
        root = root / "data"
    if not any(root.glob("BFCL_v3_*.json")):  # a v4 release's files would be ingested as v3 otherwise
        raise DataError("no BFCL_v3_<category>.json question files", path=root,
                        hint="point --path at a BFCL v3 data/ folder, e.g. bfcl_v3_pool_outputs_2025-08/data")
    return read_bfcl(SOURCE, str(root), report, **options)
