"""Examples + labels → packed tensors, batched by length with dynamic padding.

    table = build_table(examples, labels, models, tokenizer, packing)
    loader = make_loader(table, idx, scaled_meta, batch_size=16, shuffle=True, seed=0, pad_id=0)

Length bucketing: requests range from 30 to 500 tokens; batches of similar
lengths pad little, which is most of the speed on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from data.schema import Example, Label
from training.config import PackingSettings
from training.folds import group_keys
from training.metadata import metadata_row, request_metadata
from training.packing import PackStats, pack_request


@dataclass
class RequestTable:
    """One row per example: packed ids, raw metadata, and per-model label, mask and cost."""

    example_ids: list[str]
    ids: list[list[int]]
    meta_raw: np.ndarray  # [n, n_features]
    y: np.ndarray  # [n, n_models] 0/1
    mask: np.ndarray  # [n, n_models] True where a label exists
    cost: np.ndarray  # [n, n_models] USD, NaN where unknown
    groups: list[str]
    stats: list[PackStats]
    models: list[str]
    categories: list[str] | None = None  # each example's category: a training target of the category branch only

    def __len__(self) -> int:
        return len(self.example_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(x) for x in self.ids])


def label_matrix(example_ids: list[str], labels: list[Label], models: list[str]):
    """(y, mask, cost) arrays in example × model order; a repeated (example, model) label raises."""
    row = {e: i for i, e in enumerate(example_ids)}
    col = {m: j for j, m in enumerate(models)}
    y = np.zeros((len(example_ids), len(models)), dtype=np.float32)
    mask = np.zeros_like(y, dtype=bool)
    cost = np.full_like(y, np.nan, dtype=np.float64)
    for lab in labels:
        i, j = row.get(lab.example_id), col.get(lab.model)
        if i is None or j is None:
            continue
        if mask[i, j]:
            raise ValueError(f"two labels for example {lab.example_id!r}, model {lab.model!r}; fix the labels file")
        y[i, j] = float(lab.correct)
        mask[i, j] = True
        if lab.cost_usd is not None:
            cost[i, j] = lab.cost_usd
    return y, mask, cost


def build_table(
    examples: list[Example], labels: list[Label], models: list[str], tokenizer, packing: PackingSettings
) -> RequestTable:
    """Examples that have a label for at least one of `models`, packed."""
    labelled = {lab.example_id for lab in labels if lab.model in set(models)}
    examples = [e for e in examples if e.id in labelled]
    if not examples:
        raise ValueError(f"no example has a label for any of {models}; check the labels and examples files")
    ids_ = [e.id for e in examples]
    y, mask, cost = label_matrix(ids_, labels, models)
    packed = [pack_request(e.messages, e.tools, tokenizer, packing) for e in examples]
    meta = np.array([metadata_row(request_metadata(e.messages, e.tools, tokenizer)) for e in examples])
    return RequestTable(
        example_ids=ids_, ids=[p.ids for p in packed], meta_raw=meta, y=y, mask=mask, cost=cost,
        groups=group_keys(examples), stats=[p.stats for p in packed], models=list(models),
        categories=[e.category for e in examples],
    )


class Rows(Dataset):
    """Rows `idx` of a table. Items are row numbers; `collate` gathers whole batches by tensor indexing
    (per-item Python dicts cost more than the frozen head's forward pass)."""

    def __init__(self, table: RequestTable, idx: np.ndarray, meta: np.ndarray, features: torch.Tensor | None = None,
                 label_weights: np.ndarray | None = None):
        self.table, self.idx = table, np.asarray(idx)
        self.meta = torch.as_tensor(np.asarray(meta), dtype=torch.float32)
        self.y = torch.as_tensor(table.y, dtype=torch.float32)
        self.mask = torch.as_tensor(table.mask)
        if label_weights is not None:  # per label column: the loss weighs a present label by its column's weight
            self.mask = self.mask.float() * torch.as_tensor(np.asarray(label_weights), dtype=torch.float32)
        self.features = features

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, k: int) -> int:
        return int(self.idx[k])

    def collate(self, rows: list[int], pad_id: int) -> dict[str, torch.Tensor]:
        r = torch.tensor(rows, dtype=torch.long)
        out = {"row": r, "metadata": self.meta[r], "labels": self.y[r], "label_mask": self.mask[r]}
        if self.features is not None:
            out["features"] = self.features[r]
        else:
            out["input_ids"], out["attention_mask"] = pad_batch([self.table.ids[i] for i in rows], pad_id)
        return out


class BucketBatches:
    """Batches of similar length: shuffle, cut into chunks of `bucket` batches, sort each chunk by length.

    Each pass draws a new order from (seed, pass number), so runs repeat exactly.
    Without shuffling, batches are simply in length order (for prediction).
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, shuffle: bool, seed: int = 0, bucket: int = 50):
        self.lengths, self.batch_size, self.shuffle, self.seed, self.bucket = lengths, batch_size, shuffle, seed, bucket
        self.passes = 0

    def __len__(self) -> int:
        return (len(self.lengths) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        n = len(self.lengths)
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            yield from (order[i : i + self.batch_size].tolist() for i in range(0, n, self.batch_size))
            return
        rng = np.random.default_rng([self.seed, self.passes])
        self.passes += 1
        perm = rng.permutation(n)
        chunk = self.batch_size * self.bucket
        batches = []
        for s in range(0, n, chunk):
            part = perm[s : s + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches += [part[i : i + self.batch_size].tolist() for i in range(0, len(part), self.batch_size)]
        for b in rng.permutation(len(batches)):
            yield batches[b]


def pad_batch(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic padding: to the longest sequence of this batch, not to the window."""
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for k, x in enumerate(seqs):
        ids[k, : len(x)] = torch.tensor(x, dtype=torch.long)
        att[k, : len(x)] = 1
    return ids, att


def make_loader(
    table: RequestTable, idx: np.ndarray, meta: np.ndarray, *, batch_size: int, shuffle: bool, seed: int, pad_id: int,
    features: torch.Tensor | None = None, label_weights: np.ndarray | None = None,
) -> DataLoader:
    rows = Rows(table, idx, meta, features, label_weights)
    lengths = table.lengths[np.asarray(idx)] if features is None else np.zeros(len(idx), dtype=int)
    return DataLoader(
        rows, batch_sampler=BucketBatches(lengths, batch_size, shuffle, seed), collate_fn=lambda b: rows.collate(b, pad_id)
    )
