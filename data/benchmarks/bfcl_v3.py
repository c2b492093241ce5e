"""BFCL v3 (Aug 2025): 15 LLMs of 2025 in prompt mode on the 3,641 queries of 13 single-turn categories.

    switchcraft import-outputs --source bfcl_v3 --examples runs/v3/examples.parquet --out runs/v3/outputs.parquet

Recordings: `<root>/<model>/BFCL_v3_<category>.json` (`bfcl_v3_pool_outputs_2025-08/outputs/` under the data
root), BFCL-style result lines (`data.benchmarks.lines`); example ids `bfcl_v3:<id>`. Imported by name only.
"""

from __future__ import annotations

import re
from pathlib import Path

from data.benchmarks import register
from data.benchmarks.base import ResultFile
from data.benchmarks.lines import ResultLines

V3_FILE = re.compile(r"^BFCL_v3_(?P<category>\w+)\.json$")


@register
class BfclV3(ResultLines):
    name = "bfcl_v3"
    source = "bfcl_v3"
    recordings = "bfcl_v3_pool_outputs_2025-08/outputs"
    layout = "<model>/BFCL_v3_<category>.json"

    def holds(self, root: Path) -> bool:
        # BFCL's newer runner writes BFCL_v3_<category>_result.json: those are bfcl_v4's layout.
        return any(d.is_dir() and any(V3_FILE.match(f.name) and not f.name.endswith("_result.json")
                                      for f in d.glob("BFCL_v3_*.json")) for d in root.iterdir())

    def result_files(self, root: Path) -> list[ResultFile]:
        out: list[ResultFile] = []
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            out.extend((d.name, m["category"], f) for f in sorted(d.glob("BFCL_v3_*.json")) if (m := V3_FILE.match(f.name)))
        return out
