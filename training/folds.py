"""Grouped k-fold: no conversation or query on both sides of a split.

    groups = [group_key(e) for e in examples]
    fold = grouped_folds(groups, k=5, seed=0)           # fold index per example
    train, val = grouped_split(groups, train_idx, 0.1, seed=0)

Benchmarks repeat a question across categories (the same text with one tool
or with four), so examples are grouped by their normalised last user turn,
or by `meta["conversation_id"]` when the source gives one.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict

import numpy as np

from data.schema import Example

_SPACE = re.compile(r"\s+")


def group_key(example: Example) -> str:
    conv = example.meta.get("conversation_id") if isinstance(example.meta, dict) else None
    if conv is not None:
        return f"conversation:{conv}"
    return "query:" + _SPACE.sub(" ", example.question.strip().lower())


def grouped_folds(groups: list[str], k: int, seed: int = 0) -> np.ndarray:
    """Fold index (0..k-1) per item; groups whole, fold sizes balanced, deterministic for a seed."""
    if k < 2:
        raise ValueError(f"k-fold needs k >= 2, got {k}")
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    if len(members) < k:
        raise ValueError(f"{len(members)} distinct queries cannot fill {k} folds; lower folds")
    names = sorted(members)
    random.Random(seed).shuffle(names)
    # Largest groups first, each to the currently smallest fold (ties: lowest index).
    names.sort(key=lambda g: -len(members[g]))
    sizes = [0] * k
    fold = np.empty(len(groups), dtype=np.int64)
    for g in names:
        f = min(range(k), key=lambda j: (sizes[j], j))
        fold[members[g]] = f
        sizes[f] += len(members[g])
    return fold


def grouped_split(groups: list[str], idx: np.ndarray, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split `idx` into (train, validation) with about `fraction` of its groups in validation."""
    idx = np.asarray(idx)
    names = sorted({groups[i] for i in idx})
    random.Random(seed).shuffle(names)
    n_val = max(1, round(len(names) * fraction))
    if n_val >= len(names):
        raise ValueError(f"only {len(names)} distinct queries: too few to hold out a validation set")
    val_groups = set(names[:n_val])
    in_val = np.array([groups[i] in val_groups for i in idx], dtype=bool)
    return idx[~in_val], idx[in_val]
