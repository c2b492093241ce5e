"""Training benchmark: wall-clock and held-out quality of the router's training modes on this machine.

    switchcraft bench train                        # frozen MiniLM, 5-fold, cold feature cache
    switchcraft bench train --only finetune --steps 40
    switchcraft bench train --only distilbert --steps 10

Cases:
- frozen: the default config, 5-fold grouped CV + the final router, feature
  cache emptied first so extraction counts (the issue's bound: < 10 minutes);
- finetune: MiniLM fine-tuned on one fold at 128 tokens, `--steps` steps of
  one epoch (a timing run: examples/s, and the held-out numbers of that fold);
- distilbert: DistilBERT built from its config (random weights: there are
  none offline), fine-tuned for `--steps` steps: speed only, its AUC means nothing;
- add_model: a frozen router trained without the pool's last model, then
  `--add-model` of it: its held-out AUC/ECE and time, against the full
  retrain's numbers for that model (from the `frozen` case of the same run).
Writes `<run_dir>/bench_train.json`; the machine's load is recorded with it
(numbers taken on a shared machine are upper bounds).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from training.config import load_train_config
from training.recipe import run_training

CASES = {
    "frozen": [],
    "finetune": ["mode=finetune", "packing.max_tokens=128", "max_folds=1", "final_fit=false", "finetune.epochs=1"],
    "distilbert": ["mode=finetune", "backbone.name=distilbert-base-uncased", "backbone.init=random",
                   "backbone.pooling=cls", "packing.max_tokens=128", "max_folds=1", "final_fit=false",
                   "finetune.epochs=1"],
}


def run_case(name: str, config: str, run_dir: Path, steps: int | None, extra: list[str]) -> dict:
    overrides = [*CASES[name], f"run_dir={run_dir / name}", "progress=false", *extra]
    if name != "frozen" and steps:
        overrides.append(f"finetune.max_steps_per_epoch={steps}")
    cfg = load_train_config(config, overrides)
    shutil.rmtree(Path(cfg.run_dir) / "cache", ignore_errors=True)  # time feature extraction too
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    m = run_training(cfg)
    wall = time.perf_counter() - t0
    fold0 = m["fold_details"][0]
    return {
        "case": name, "overrides": overrides, "wall_s": round(wall, 1), "timing": m["timing"],
        "train_examples_per_s": round(fold0["train_examples_per_s"], 2), "n_examples": m["n_examples"],
        "folds_run": m["folds_run"], "macro_auc": m["macro_auc"], "macro_ece": m["macro_ece"],
        "per_model": {k: {"auc": v["auc"], "ece": v["ece"], "ece_uncalibrated": v["ece_uncalibrated"],
                          "base_rate": v["base_rate"]} for k, v in m["per_model"].items()},
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count(),
    }


def run_add_model(config: str, run_dir: Path, extra: list[str], full: dict | None) -> dict:
    from data.pool import load_pool
    from training.add_model import add_model

    base = load_train_config(config, extra)
    pool = load_pool(base.pool).names
    new = pool[-1]
    overrides = [f"run_dir={run_dir / 'add_model'}", "progress=false", f"models=[{', '.join(pool[:-1])}]", *extra]
    cfg = load_train_config(config, overrides)
    frozen_cache = run_dir / "frozen" / "cache"
    if frozen_cache.is_dir():  # same backbone and packing: reuse the frozen case's features
        shutil.copytree(frozen_cache, Path(cfg.run_dir) / "cache", dirs_exist_ok=True)
    t0 = time.perf_counter()
    run_training(cfg)
    base_s = time.perf_counter() - t0
    m = add_model(cfg, new)
    full_m = (full or {}).get("per_model", {}).get(new, {})
    return {"case": "add_model", "model": new, "base_router_s": round(base_s, 1), "add_model_s": round(m["seconds"], 1),
            "add_model": {k: m[k] for k in ("auc", "ece", "ece_uncalibrated", "n")},
            "full_retrain": {k: full_m.get(k) for k in ("auc", "ece")}, "loadavg_after": os.getloadavg()}


def main(config: str = "configs/train.yaml", run_dir: str | Path = "runs/bench", only: str = "frozen", steps: int = 40,
         overrides: list[str] = ()) -> None:
    """`switchcraft bench train`: run the cases named in `only` (comma-separated), print each, and merge them into
    `<run_dir>/bench_train.json`."""
    run_dir = Path(run_dir)
    overrides = list(overrides)
    results = []
    for name in [n.strip() for n in only.split(",")]:
        if name == "add_model":
            full = next((r for r in results if r["case"] == "frozen"), None)
            r = run_add_model(config, run_dir, overrides, full)
            results.append(r)
            print(f"add_model {r['model']}: {r['add_model_s']} s, held-out AUC {r['add_model']['auc']:.3f} "
                  f"ECE {r['add_model']['ece']:.3f}; full retrain: {r['full_retrain']}")
            continue
        r = run_case(name, config, run_dir, steps, overrides)
        results.append(r)
        print(f"{r['case']}: {r['wall_s']} s wall, {r['train_examples_per_s']} train examples/s, "
              f"macro AUC {r['macro_auc']:.3f}, macro ECE {r['macro_ece']:.3f} (load {r['loadavg_before'][0]:.1f})")
        for model, v in r["per_model"].items():
            print(f"  {model:34s} AUC {v['auc']:.3f}  ECE {v['ece']:.3f}  base rate {v['base_rate']:.3f}")
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "bench_train.json"
    # Cases run separately accumulate in one file; a case run again replaces its old entry.
    old = json.loads(out.read_text()) if out.exists() else []
    done = {r["case"] for r in results}
    out.write_text(json.dumps([r for r in old if r["case"] not in done] + results, indent=2, default=str))
    print(f"wrote {out}")
