"""A lever for issue 24, measured: the request's category guessed by a *fine-tuned* encoder, held out.

    .venv/bin/python -m evaluation.category_finetune RUN_DIR OUT_DIR [--epochs 4] [--lr 5e-5] [--folds N]

The category branch guesses each request's BFCL category from TF-IDF and metadata (85.5% right held out on the
default pool; every input tried since saturates near 89%, docs/router.md). The shipped encoder is frozen. This
fine-tunes the run's backbone end to end — all its layers (`training.model.load_backbone` with `layers` unset;
the shipped router reads the first only), mean pooling → a linear layer over the categories, cross-entropy — on
each fold's own fit rows (`evaluation.category_refit.fold_fits`: the training split and validation, as the
branch sees them) and predicts the held-out fold, so every probability is out of fold. It writes
OUT_DIR/category_finetune.npz (`proba` n × categories, `classes`, `fold`, `example_ids`) and prints the held-out
accuracy and the largest confusions. Nothing here is what `switchcraft train` does: it answers whether a tuned
encoder tells the categories apart better than the frozen one before any serving change is made for it.
Cost on the 2-core machine: ~7 minutes per fold at 128 tokens, 4 epochs (idle; twice that beside other work).
Measured (docs/router.md, "A fine-tuned encoder for the category guess"): fold 0 of the default pool, 82.2%
against the shipped TF-IDF + metadata classifier's 87.4% on the same 326 requests — not pursued.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np


def finetune_fold(backbone, ids: list[list[int]], y: np.ndarray, n_classes: int, test_ids: list[list[int]], *,
                  epochs: int, lr: float, batch: int, seed: int, pad: int) -> np.ndarray:
    """Fine-tune a fresh copy of the backbone (`BackboneSettings`) on (ids, y); P(category) of `test_ids`."""
    import torch
    from torch import nn
    from tqdm import tqdm

    from training.dataset import pad_batch
    from training.model import _masked_mean, load_backbone

    torch.manual_seed(seed)
    enc, _ = load_backbone(backbone)
    head = nn.Linear(enc.config.hidden_size, n_classes)
    params = list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    steps = epochs * int(np.ceil(len(ids) / batch))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, steps // 10))
                                              * max(0.0, (steps - s) / steps))

    def forward(x, att):
        return head(_masked_mean(enc(input_ids=x, attention_mask=att).last_hidden_state, att.bool()))

    rng = np.random.default_rng(seed)
    yt = torch.tensor(y, dtype=torch.long)
    enc.train()
    with tqdm(total=steps, desc="fine-tune", leave=False) as bar:
        for _ in range(epochs):
            order = rng.permutation(len(ids))
            for s in range(0, len(ids), batch):
                b = order[s:s + batch]
                x, att = pad_batch([ids[i] for i in b], pad)
                loss = nn.functional.cross_entropy(forward(x, att), yt[b])
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                sched.step()
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
    enc.eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(test_ids), 64):
            x, att = pad_batch(test_ids[s:s + 64], pad)
            out.append(torch.softmax(forward(x, att), dim=-1).numpy())
    return np.concatenate(out)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--folds", type=int, default=None, help="Only the first N folds (a screening run).")
    args = ap.parse_args(argv)

    from evaluation.category_refit import fold_fits, run_config
    from training.model import load_backbone
    from training.recipe import PARTS_FILE

    cfg = run_config(args.run)
    parts = dict(np.load(args.run / PARTS_FILE))
    backbone = cfg.backbone.model_copy(update={"layers": None})  # every layer, not the router's first only
    pad = load_backbone(backbone)[1].pad_token_id
    proba, classes, t = None, None, None
    t0 = time.perf_counter()
    for k, ff in enumerate(fold_fits(args.run, cfg, parts)):
        if args.folds is not None and k >= args.folds:
            break
        t = ff.table
        if classes is None:
            classes = sorted(set(t.categories))
            proba = np.full((len(t), len(classes)), np.nan)
        index = {c: j for j, c in enumerate(classes)}
        y = np.array([index[t.categories[i]] for i in ff.rows])
        proba[ff.test] = finetune_fold(backbone, [t.ids[i] for i in ff.rows], y, len(classes),
                                       [t.ids[i] for i in ff.test], epochs=args.epochs, lr=args.lr, batch=args.batch,
                                       seed=cfg.seed, pad=pad)
        done = ~np.isnan(proba[:, 0])
        truth = np.array([index[c] for c in t.categories])
        print(f"fold done: held-out accuracy so far {np.mean(proba[done].argmax(1) == truth[done]):.3f} "
              f"({done.sum()} rows, {time.perf_counter() - t0:.0f} s)", flush=True)
    done = ~np.isnan(proba[:, 0])
    truth = np.array([classes.index(c) for c in t.categories])
    guess = proba.argmax(1)
    wrong = Counter((classes[a], classes[b]) for a, b in zip(truth[done], guess[done]) if a != b)
    summary = {"accuracy": float(np.mean(guess[done] == truth[done])), "rows": int(done.sum()),
               "confusions": [[a, b, n] for (a, b), n in wrong.most_common(10)],
               "epochs": args.epochs, "lr": args.lr, "seconds": round(time.perf_counter() - t0)}
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out / "category_finetune.npz", proba=proba, classes=np.array(classes),
                        fold=parts["fold"], example_ids=np.array(t.example_ids))
    (args.out / "category_finetune.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
