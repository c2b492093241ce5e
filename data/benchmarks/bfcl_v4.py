"""BFCL v4 (also v3 runs of BFCL's newer runner): single-turn answers with token counts.

    switchcraft import-outputs --source bfcl_v4

Recordings: `BFCL_v{3,4}_<category>_result.json` files anywhere below the root (`bfcl_v4_outputs/` under the
data root), in `<model>/[non_live|live|…]/`; the model is the folder above those (`multiple_4models/<model>/
non_live/…`, `<run>/result/<model>/live/…`); score files beside them are not outputs. BFCL-style result lines
(`data.benchmarks.lines`); example ids `bfcl_v4:<id>`.
"""

from __future__ import annotations

import re
from pathlib import Path

from data.benchmarks import register
from data.benchmarks.base import ResultFile
from data.benchmarks.lines import ResultLines
from data.errors import DataError

V4_FILE = re.compile(r"^BFCL_v[34]_(?P<category>\w+?)_result\.json$")
# Folders between a model's folder and its result files.
V4_GROUPS = {"non_live", "live", "multi_turn", "agentic", "result", "memory", "web_search"}


@register
class BfclV4(ResultLines):
    name = "bfcl_v4"
    source = "bfcl_v4"
    recordings = "bfcl_v4_outputs"
    layout = "<model>/…/BFCL_v4_<category>_result.json"
    in_all = True

    def holds(self, root: Path) -> bool:
        return any(V4_FILE.match(p.name) for p in root.rglob("BFCL_v*_result.json"))

    def result_files(self, root: Path) -> list[ResultFile]:
        out: list[ResultFile] = []
        for f in sorted(root.rglob("BFCL_v*_result.json")):
            m = V4_FILE.match(f.name)
            if not m:
                continue
            model_dir = f.parent
            while model_dir.name in V4_GROUPS and model_dir != root:
                model_dir = model_dir.parent
            if model_dir == root:
                raise DataError("result file not inside a model folder", path=f)
            out.append((model_dir.name, m["category"], f))
        return out
