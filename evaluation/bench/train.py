"""Wall-clock and held-out quality of the router's training modes (`CASES`; `add_model`: a router without the pool's
last model, then `--add-model` of it, against `frozen`'s full retrain), merged into `<run_dir>/bench_train.json`.

    switchcraft bench train --only frozen,finetune,distilbert,add_model --steps 40   # figures: docs/performance.md
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from evaluation.bench._support import write_json
from training.config import load_train_config
from training.recipe import run_training

ONE_FOLD = ["mode=finetune", "packing.max_tokens=128", "max_folds=1", "final_fit=false", "finetune.epochs=1"]
CASES = {"frozen": [], "finetune": ONE_FOLD,
         "distilbert": [*ONE_FOLD, "backbone.name=distilbert-base-uncased", "backbone.init=random",
                        "backbone.pooling=cls"]}


def run_case(name: str, config: str, run_dir: Path, steps: int | None, extra: list[str]) -> dict:
    overrides = [*CASES[name], f"run_dir={run_dir / name}", "progress=false", *extra]
    if name != "frozen" and steps:
        overrides.append(f"finetune.max_steps_per_epoch={steps}")
    cfg = load_train_config(config, overrides)
    shutil.rmtree(Path(cfg.run_dir) / "cache", ignore_errors=True)  # time feature extraction too
    load_before, t0 = os.getloadavg(), time.perf_counter()
    m = run_training(cfg)
    return {"case": name, "overrides": overrides, "wall_s": round(time.perf_counter() - t0, 1), "timing": m["timing"],
            "train_examples_per_s": round(m["fold_details"][0]["train_examples_per_s"], 2),
            "n_examples": m["n_examples"], "folds_run": m["folds_run"], "macro_auc": m["macro_auc"],
            "macro_ece": m["macro_ece"],
            "per_model": {k: {q: v[q] for q in ("auc", "ece", "ece_uncalibrated", "base_rate")}
                          for k, v in m["per_model"].items()},
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count()}


def run_add_model(config: str, run_dir: Path, extra: list[str], full: dict | None) -> dict:
    from data.pool import load_pool
    from training.add_model import add_model

    pool = load_pool(load_train_config(config, extra).pool).names
    cfg = load_train_config(config, [f"run_dir={run_dir / 'add_model'}", "progress=false",
                                     f"models=[{', '.join(pool[:-1])}]", *extra])
    if (run_dir / "frozen" / "cache").is_dir():  # same backbone and packing: reuse the frozen case's features
        shutil.copytree(run_dir / "frozen" / "cache", Path(cfg.run_dir) / "cache", dirs_exist_ok=True)
    t0 = time.perf_counter()
    run_training(cfg)
    base_s = time.perf_counter() - t0
    m = add_model(cfg, pool[-1])
    full_m = (full or {}).get("per_model", {}).get(pool[-1], {})
    return {"case": "add_model", "model": pool[-1], "base_router_s": round(base_s, 1),
            "add_model_s": round(m["seconds"], 1), "add_model": {k: m[k] for k in ("auc", "ece", "ece_uncalibrated", "n")},
            "full_retrain": {k: full_m.get(k) for k in ("auc", "ece")}, "loadavg_after": os.getloadavg()}


def main(config: str = "configs/train.yaml", run_dir: str | Path = "runs/bench", only: str = "frozen", steps: int = 40,
         overrides: list[str] = ()) -> list[dict]:
    """`switchcraft bench train`: run the cases named in `only` (comma-separated), print each, and merge them into
    `<run_dir>/bench_train.json` (a case run again replaces its old entry)."""
    run_dir, results, names = Path(run_dir), [], [n.strip() for n in only.split(",")]
    unknown = [n for n in names if n not in (*CASES, "add_model")]
    if unknown:
        raise ValueError(f"--only {','.join(unknown)}: the cases are {', '.join([*CASES, 'add_model'])}")
    for name in names:
        if name == "add_model":
            r = run_add_model(config, run_dir, list(overrides), next((x for x in results if x["case"] == "frozen"), None))
            print(f"add_model {r['model']}: {r['add_model_s']} s, held-out AUC {r['add_model']['auc']:.3f} "
                  f"ECE {r['add_model']['ece']:.3f}; full retrain: {r['full_retrain']}")
        else:
            r = run_case(name, config, run_dir, steps, list(overrides))
            print(f"{r['case']}: {r['wall_s']} s wall, {r['train_examples_per_s']} train examples/s, macro AUC "
                  f"{r['macro_auc']:.3f}, macro ECE {r['macro_ece']:.3f} (load {r['loadavg_before'][0]:.1f})")
            for model, v in r["per_model"].items():
                print(f"  {model:34s} AUC {v['auc']:.3f}  ECE {v['ece']:.3f}  base rate {v['base_rate']:.3f}")
        results.append(r)
    out = run_dir / "bench_train.json"
    old = json.loads(out.read_text()) if out.exists() else []
    done = {r["case"] for r in results}
    write_json(out, [r for r in old if r["case"] not in done] + results)
    print(f"wrote {out}")
    return results
