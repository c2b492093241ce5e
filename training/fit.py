"""One training run: AdamW, linear warm-up and decay, early stopping on validation loss, via accelerate.

    result = fit(model, param_groups, train_loader, val_loader, settings..., accelerator=Accelerator(cpu=True))
    rows, logits = predict_logits(model, loader, accelerator)

The same loop trains the whole network (finetune: batches carry input_ids)
and the head alone (frozen: batches carry cached encoder features); the
model's forward takes either. Labels missing for some (example, model) pairs
are masked out of the loss rather than counted as wrong.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

MODEL_INPUTS = ("metadata", "input_ids", "attention_mask", "features")


@dataclass
class FitResult:
    best_val_loss: float
    best_epoch: int
    epochs_run: int
    steps: int
    train_seconds: float
    train_examples: int  # examples seen in training steps (all epochs)
    history: list[dict] = field(default_factory=list)

    @property
    def examples_per_s(self) -> float:
        return self.train_examples / self.train_seconds if self.train_seconds > 0 else float("nan")


def masked_bce(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, pos_weight: torch.Tensor | None = None):
    loss = nn.functional.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight, reduction="none")
    mask = mask.to(loss.dtype)
    return (loss * mask).sum() / mask.sum().clamp(min=1.0)


def balanced_pos_weight(y: np.ndarray, mask: np.ndarray) -> torch.Tensor:
    """negatives / positives per model, clipped to [0.1, 10] so a rare class cannot swamp the loss."""
    pos = (y * mask).sum(0)
    neg = ((1 - y) * mask).sum(0)
    return torch.tensor(np.clip(neg / np.maximum(pos, 1), 0.1, 10.0), dtype=torch.float32)


@contextmanager
def torch_threads(n: int | None):
    """Run with n intra-op threads (None: leave as is), then restore."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k in MODEL_INPUTS}


@torch.no_grad()
def predict_logits(model: nn.Module, loader, accelerator) -> tuple[np.ndarray, np.ndarray]:
    """(rows, logits) for every batch of the loader, with dropout off."""
    model.eval()
    rows, out = [], []
    for batch in loader:
        logits = model(**_inputs(batch))
        rows.append(accelerator.gather_for_metrics(batch["row"]).cpu().numpy())
        out.append(accelerator.gather_for_metrics(logits).float().cpu().numpy())
    return np.concatenate(rows), np.concatenate(out)


@torch.no_grad()
def validation_loss(model, loader, pos_weight, accelerator) -> float:
    model.eval()
    total, weight = 0.0, 0.0
    for batch in loader:
        logits = model(**_inputs(batch))
        n = float(batch["label_mask"].sum())
        total += float(masked_bce(logits, batch["labels"], batch["label_mask"], pos_weight)) * n
        weight += n
    return total / max(weight, 1.0)


def fit(
    model: nn.Module,
    param_groups: list[dict],
    train_loader,
    val_loader,
    *,
    epochs: int,
    patience: int,
    warmup_ratio: float,
    weight_decay: float,
    accelerator,
    pos_weight: torch.Tensor | None = None,
    max_steps_per_epoch: int | None = None,
    progress: bool = True,
    step_bars: bool = False,
    desc: str = "train",
) -> FitResult:
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.AdamW(param_groups, weight_decay=weight_decay)
    steps_per_epoch = min(len(train_loader), max_steps_per_epoch or math.inf)
    total = max(1, epochs * steps_per_epoch)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(warmup_ratio * total), total)
    model, optimizer, train_loader, val_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, val_loader, scheduler
    )
    if pos_weight is not None:
        pos_weight = pos_weight.to(accelerator.device)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}

    best, best_epoch, best_state, bad_epochs = math.inf, 0, None, 0
    steps, seen, seconds, history = 0, 0, 0.0, []
    bar = tqdm(range(epochs), desc=desc, disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        start = time.perf_counter()
        batches = tqdm(train_loader, total=steps_per_epoch, desc=f"epoch {epoch + 1}", disable=not (progress and step_bars), leave=False)
        for k, batch in enumerate(batches):
            if k >= steps_per_epoch:
                break
            loss = masked_bce(model(**_inputs(batch)), batch["labels"], batch["label_mask"], pos_weight)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            steps += 1
            seen += len(batch["row"])
            batches.set_postfix(loss=f"{loss.item():.4f}")
        seconds += time.perf_counter() - start
        val = validation_loss(model, val_loader, pos_weight, accelerator)
        history.append({"epoch": epoch + 1, "val_loss": val})
        bar.set_postfix(val_loss=f"{val:.4f}")
        if val < best - 1e-4:
            best, best_epoch, bad_epochs = val, epoch + 1, 0
            # Only what training changes: a frozen encoder need not be copied.
            best_state = {n: t.detach().clone() for n, t in model.state_dict().items() if n in trainable}
        else:
            bad_epochs += 1
            if bad_epochs >= patience:
                break
    if best_state is not None:  # back to the epoch with the lowest validation loss
        model.load_state_dict(best_state, strict=False)
    return FitResult(best, best_epoch, len(history), steps, seconds, seen, history)

