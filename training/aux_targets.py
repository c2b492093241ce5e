"""Extra training targets: the verified labels of recorded models outside the pool.

    aux = aux_targets(read_outputs("runs/default/outputs.parquet"), examples_by_id, exclude=pool_names,
                      example_ids=table.example_ids)
    aux.models, aux.y, aux.mask                       # [n, k] in table order

BFCL v1 records 71 models; the pool routes over 8. The other 63 say which
queries are hard for tool-calling models in general, so the head learns them
alongside the pool's (multi-task), and afterwards keeps only the pool's
outputs: nothing of them is saved or served (`RouterModel.keep_outputs`).
They are labelled exactly as pool labels are (`data.labels.label_outputs`), a
BFCL native function-calling run (`-FC`, …) counting a text answer as no call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from data.labels import label_outputs
from data.pool import Pool, PoolModel, Prices
from data.schema import Example, Output
from data.verify.batch import is_native_fc_run


@dataclass
class AuxTargets:
    models: list[str]
    y: np.ndarray  # float32 [n, k], 0/1
    mask: np.ndarray  # bool [n, k], True where the model answered that example

    def __len__(self) -> int:
        return len(self.models)


def aux_targets(outputs: Iterable[Output], examples: dict[str, Example], *, exclude: Iterable[str],
                example_ids: Sequence[str]) -> AuxTargets:
    """Labels of every model in `outputs` not named in `exclude` (the pool's names and recordings)."""
    skip = set(exclude)
    outputs = [o for o in outputs if o.model not in skip and o.example_id in examples]
    models = sorted({o.model for o in outputs})
    # Labelling needs a pool; costs are not used here, so each stand-in is priced at zero per query.
    pool = Pool(models=[PoolModel(name=m, prices=Prices(usd_per_query=0.0),
                                  prompt_style="native" if is_native_fc_run(m) else "prompt") for m in models]) if models else None
    row = {e: i for i, e in enumerate(example_ids)}
    col = {m: j for j, m in enumerate(models)}
    y = np.zeros((len(example_ids), len(models)), dtype=np.float32)
    mask = np.zeros_like(y, dtype=bool)
    for lab in label_outputs(outputs, examples, pool) if pool else []:
        i = row.get(lab.example_id)
        if i is not None:
            y[i, col[lab.model]] = float(lab.correct)
            mask[i, col[lab.model]] = True
    return AuxTargets(models, y, mask)
