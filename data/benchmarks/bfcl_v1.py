"""BFCL v1 (Aug 2024): 1,630 queries, 71 models' answers of the 2024-08-11 leaderboard run.

    switchcraft import-outputs --source bfcl_v1            # 71 models x 1,630 queries

Recordings: `<root>/<model>/<category>.jsonl` (`bfcl_v1_pool_outputs_2024-08-11/` under the data root), BFCL-style
result lines (`data.benchmarks.lines`); example ids `bfcl_v1:<id>`. BFCL's price file suggests GPU-second prices
for its open-weight models, and an earlier run of the same queries (2024-07-25) gives test–retest.
"""

from __future__ import annotations

from pathlib import Path

from data.benchmarks import register
from data.benchmarks.base import ResultFile
from data.benchmarks.lines import ResultLines


@register
class BfclV1(ResultLines):
    name = "bfcl_v1"
    source = "bfcl_v1"
    recordings = "bfcl_v1_pool_outputs_2024-08-11"
    layout = "<model>/<category>.jsonl"
    in_all = True
    price_file = "prices"
    earlier_run = "bfcl_v1_earlier"

    def holds(self, root: Path) -> bool:
        return any(d.is_dir() and any(d.glob("*.jsonl")) for d in root.iterdir())

    def result_files(self, root: Path) -> list[ResultFile]:
        out: list[ResultFile] = []
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            out.extend((d.name, f.stem, f) for f in sorted(d.glob("*.jsonl")))
        return out
