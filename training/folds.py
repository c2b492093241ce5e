"""Grouped k-fold: no conversation or query on both sides of a split.

    groups = group_keys(examples)
    fold = grouped_folds(groups, k=5, seed=0)           # fold index per example
    train, val = grouped_split(groups, train_idx, 0.1, seed=0)

Benchmarks repeat a question across categories (the same text with one tool
or with four), so examples are grouped by their normalised last user turn,
or by `meta["conversation_id"]` when the source gives one.

BFCL's live categories (v3, v4) are real users' requests, several from one
user's session with one set of functions: `live_simple_143-95-0` is query 0 of
contribution 95 of live_simple. Such a contribution is one group, and a live
query repeated in another contribution or category (the same text as an
`irrelevance` question, say) joins their groups: `group_keys` unites every
example sharing either key, so neither a live conversation nor a question
spans folds (BFCL v3: 3,641 queries in 1,983 groups, the largest 188).
BFCL v1 has no live categories: its groups are `group_key`'s, unchanged.
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


# bfcl_v3:live_multiple_12-4-2 → (bfcl_v3, live_multiple, 4): source, category, contribution.
_LIVE_ID = re.compile(r"^(bfcl_v[34]):(live_[a-z_]+?)_\d+-(\d+)-\d+$")


def live_conversation(example: Example) -> str | None:
    """The BFCL live contribution an example belongs to (`conversation:bfcl_v3:live_simple:95`), else None."""
    m = _LIVE_ID.match(example.id)
    return f"conversation:{m.group(1)}:{m.group(2)}:{m.group(3)}" if m else None


def group_keys(examples: list[Example]) -> list[str]:
    """The group of each example: `group_key`'s, with the examples of one BFCL live contribution and every
    example sharing a key with them united (union-find); a united group is named by its smallest key."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    keys = [group_key(e) for e in examples]
    for key, e in zip(keys, examples):
        conv = live_conversation(e)
        a, b = find(key), find(conv) if conv else find(key)
        if a != b:
            parent[max(a, b)] = min(a, b)  # the root stays the smallest key
    return [find(k) for k in keys]


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
