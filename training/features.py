"""Frozen-mode encoder features: computed once per (encoder, packing, requests), cached in the run dir.

    feats = cached_features(model, table, cache_dir="runs/default/cache", key_parts={...})

Feature extraction is the only expensive part of frozen training, and every
fold (and `--add-model`) reuses the same features, so they are computed once
and kept as `<run_dir>/cache/features-<hash>.pt`; the hash covers everything
that changes them (backbone, its config, pooling, packing, the packed ids).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from training.dataset import BucketBatches, RequestTable, pad_batch

log = logging.getLogger(__name__)


@torch.no_grad()
def extract_features(model, table: RequestTable, *, batch_size: int, pad_id: int, progress: bool = True) -> torch.Tensor:
    """Pooled encoder output for every row of the table, [n, hidden], in table order."""
    model.eval()
    device = next(model.parameters()).device
    out = torch.empty((len(table), model.feature_size), dtype=torch.float32)
    batches = BucketBatches(table.lengths, batch_size, shuffle=False)
    for rows in tqdm(batches, desc="features", disable=not progress, leave=False):
        ids, att = pad_batch([table.ids[i] for i in rows], pad_id)
        out[torch.tensor(rows)] = model.encode(ids.to(device), att.to(device)).float().cpu()
    return out


def cache_key(parts: dict[str, Any], table: RequestTable) -> str:
    h = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    for ids in table.ids:
        h.update(np.asarray(ids, dtype=np.int32).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def cached_features(
    model, table: RequestTable, *, cache_dir: str | Path, key_parts: dict[str, Any], batch_size: int, pad_id: int,
    progress: bool = True,
) -> tuple[torch.Tensor, bool]:
    """(features, came_from_cache)."""
    path = Path(cache_dir) / f"features-{cache_key(key_parts, table)}.pt"
    if path.exists():
        feats = torch.load(path, weights_only=True)
        if feats.shape == (len(table), model.feature_size):
            return feats, True
        log.warning("%s has shape %s, expected %s; recomputing", path, tuple(feats.shape), (len(table), model.feature_size))
    feats = extract_features(model, table, batch_size=batch_size, pad_id=pad_id, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(feats, tmp)
    tmp.replace(path)  # never leave a half-written cache behind
    return feats, False
