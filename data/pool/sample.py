"""Draw a model pool from the recordings: any mix of API and open-weight models, priced from the price file.

    switchcraft pool sample --n 8 --seed 3 --out /tmp/pool_3.yaml      # then: switchcraft reproduce --pool /tmp/pool_3.yaml
    from data.pool.sample import sample_pool
    pool_dict, skipped = sample_pool(recordings, price_file, n=8, seed=3)

The candidates are the recording folders with a price: API models by their
BFCL list price per token, open-weight models per GPU-second (BFCL's 8×V100
convention, `data.pool.open_weight_prices`). A model's prompt style is read
from its recordings, the way it was labelled: results recorded as lists of
calls come from a native function-calling API, strings from a prompt.
Models without a price are skipped and counted. For checking that nothing is
tuned to the default pool: every pool drawn here must run `reproduce` the same way.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from data.errors import DataError
from data.pool import load_price_table, open_weight_prices


def recorded_style(folder: Path, lines: int = 20) -> str:
    """"native" when the model's recorded results are lists of calls (data, not text), else "prompt"."""
    kinds = Counter()
    for f in sorted(folder.glob("*.jsonl")):
        with f.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i >= lines:
                    break
                try:
                    kinds[isinstance(json.loads(line).get("result"), list)] += 1
                except (json.JSONDecodeError, AttributeError):
                    continue
        if sum(kinds.values()) >= lines:
            break
    return "native" if kinds[True] > kinds[False] else "prompt"


def sample_pool(recordings: str | Path, price_file: str | Path, *, n: int = 8, seed: int = 0,
                open_weight: int | None = None) -> tuple[dict, dict[str, list[str]]]:
    """(pool file as a dict, models skipped by reason). `open_weight`: how many of the n are open-weight
    (default: whatever the draw gives)."""
    root = Path(recordings)
    if not root.is_dir():
        raise DataError("no such recordings folder", path=root, hint="see outputs.bfcl_v1 in configs/data.yaml")
    api, oss = load_price_table(price_file), open_weight_prices(price_file)
    folders = sorted(p.name for p in root.iterdir() if p.is_dir())
    skipped = {"no price in the price file": [f for f in folders if f not in api and f not in oss]}
    api_c = [f for f in folders if f in api]
    oss_c = [f for f in folders if f in oss and f not in api]
    if n < 2:
        raise DataError(f"a pool needs at least 2 models to route between, not --n {n}", path=price_file)
    if n > len(api_c) + len(oss_c):
        raise DataError(f"cannot draw {n} models: {len(api_c) + len(oss_c)} recorded models are priced "
                        f"({len(api_c)} API, {len(oss_c)} open-weight; {len(skipped['no price in the price file'])} "
                        "have no price)", path=price_file)
    if open_weight is not None and not 0 <= open_weight <= n:
        raise DataError(f"--open-weight {open_weight} must be between 0 and --n {n}", path=price_file)
    rng = np.random.default_rng(seed)
    if open_weight is None:
        pick = list(rng.choice(api_c + oss_c, size=n, replace=False))
    else:
        if open_weight > len(oss_c) or n - open_weight > len(api_c):
            raise DataError(f"cannot draw {open_weight} open-weight and {n - open_weight} API models: "
                            f"{len(oss_c)} and {len(api_c)} are priced", path=price_file)
        pick = list(rng.choice(oss_c, open_weight, replace=False)) + list(rng.choice(api_c, n - open_weight, replace=False))
    models = []
    for name in sorted(str(p) for p in pick):
        prices = (api.get(name) or oss[name]).model_dump(exclude_none=True)
        models.append({"name": name, "prompt_style": recorded_style(root / name), "prices": prices})
    return {"models": models}, skipped


def sample_from_pool(pool_file: str | Path, *, n: int = 8, seed: int = 0) -> dict:
    """n models drawn from a pool file (e.g. the 15 of configs/pools/bfcl_v3_2025.yaml), each kept as that file
    prices and serves it, in the file's order, with its `benchmark`: a pool file of its own."""
    import yaml

    path = Path(pool_file)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise DataError(f"cannot read the pool file: {e}", path=path) from e
    models = (raw or {}).get("models") if isinstance(raw, dict) else None
    if not isinstance(models, list) or not models:
        raise DataError("no models in the pool file", path=path, field="models")
    if n < 2:
        raise DataError(f"a pool needs at least 2 models to route between, not --n {n}", path=path)
    if n > len(models):
        raise DataError(f"cannot draw {n} models from a pool of {len(models)}", path=path, field="models")
    keep = sorted(np.random.default_rng(seed).choice(len(models), size=n, replace=False).tolist())
    out = {k: v for k, v in raw.items() if k != "models"}
    return {**out, "models": [models[i] for i in keep]}
