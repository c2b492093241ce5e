"""The main job: the oracle-gap tables from real recordings, end to end.

    switchcraft reproduce                      # BFCL v3, the 2025 pool: runs/default/report/report.md
    switchcraft reproduce --with-pool configs/pools/nexusbench_2025.yaml   # + NexusBench's table (make reproduce)
    switchcraft reproduce --pool configs/pool.yaml --run-dir runs/bfcl_v1   # BFCL v1, the 2024 pool
    switchcraft reproduce --run-dir runs/tiny --max-examples 120 --folds 3   # a quick slice
    switchcraft reproduce --labels consensus   # also fit everything on consensus labels (no ground truth)

The benchmark is the pool file's `benchmark:` (bfcl_v1 when it has none), an adapter of `data/benchmarks/`: its
questions' source (`sources.<source>` in configs/data.yaml) is ingested and its recordings (its folder under the
data root, or `outputs.<benchmark>`) imported; a benchmark whose harness judged the answers (NexusBench) is
labelled by that harness.

Steps (each writes into the run dir, each timed):
ingest the benchmark → import its recordings (BFCL v1: 71 models; v3: the 2025 run's) → label with our
verifier → train the router with grouped k-fold (frozen MiniLM on a CPU; fine-tuning when asked; groups:
`training.folds.group_keys`) → evaluate against every baseline on the same held-out folds → write the
report. Test–retest needs two recorded runs of the same queries: BFCL v1 only (the report says so for
others). With `--labels consensus`, also: consensus labels (`data.consensus`, no expected
answers), a second router trained on them (`<run>/consensus/`), and the report's section "Without ground
truth" (`evaluation.report.without_truth`): everything fitted on consensus labels, scored with the true ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console

from data.benchmarks import get as get_benchmark
from data.config import load_data_config
from data.errors import DataError
from data.ingest import ingest
from data.labels import run_labels
from data.pool import check_costable, load_pool
from data.recorded import check_recorded, import_recorded
from data.schema import read_examples, read_labels, read_outputs, write_outputs
from evaluation.report.evaluate import run_evaluation
from evaluation.report.report import write_report
from evaluation.offline.routing_eval import oof_matrix
from training.policy.fit import write_strategy_policy
from training.config import load_train_config
from training.recipe import OOF_FILE, run_training


@dataclass
class ReproduceOptions:
    run_dir: Path = Path("runs/default")
    data_config: Path = Path("configs/data.yaml")
    pool: Path = Path("configs/pools/bfcl_v3_2025.yaml")  # the 2024 BFCL v1 pool: configs/pool.yaml
    train_config: Path = Path("configs/train.yaml")
    train_overrides: list[str] = field(default_factory=list)
    max_examples: int | None = None  # a slice, for smoke runs and tests
    folds: int | None = None
    target: str = "match_best"
    budget_per_million: float | None = None
    knn: bool = True
    import_all_models: bool = True  # False: only the pool's recordings (quick slices)
    progress: bool = field(default_factory=lambda: __import__("sys").stdout.isatty())  # bars only on a terminal
    labels: str = "truth"  # "consensus": also fit on consensus labels (report section "Without ground truth")
    with_pools: list[Path] = field(default_factory=list)  # second benchmarks: each run into <run_dir>/<benchmark>/
    transfer: bool = True  # with a second benchmark: each run's router scored on the other's queries


@dataclass
class ReproduceResult:
    report: Path
    headline: pd.DataFrame
    timings: dict[str, float]


def reproduce(opts: ReproduceOptions, console: Console | None = None) -> ReproduceResult:
    console = console or Console()
    run = Path(opts.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    step = partial(_step, console, timings)

    data_cfg, pool, benchmark, recordings = _inputs(opts)
    bench = pool.benchmark
    examples_path, outputs_path = run / "examples.parquet", run / "outputs.parquet"
    # A benchmark its harness labels (NexusBench, per episode) is labelled from the recordings; its other
    # recorded models are not imported: as training targets they would carry our verifier's labels.
    harness = benchmark.harness

    def _ingest():
        res = ingest(data_cfg, [benchmark.source], out=examples_path)
        console.print(f"{res.report.total():,} {bench} queries")
        return res

    step("ingest", _ingest)
    examples = {e.id: e for e in read_examples(examples_path)}

    def _import():
        models = None if opts.import_all_models and not harness else [m.recording for m in pool.models]
        outputs = import_recorded(recordings, examples=examples, models=models, progress=opts.progress)
        write_outputs(outputs_path, outputs)
        console.print(f"{len(outputs):,} recorded outputs of {len({o.model for o in outputs})} models")

    step("import recorded outputs", _import)
    labels_run = step("label", lambda: run_labels(opts.pool, recordings if harness else outputs_path, examples_path, run))
    console.print(f"{labels_run.labels:,} labels for {len(pool.models)} pool models")
    consensus = None
    if opts.labels == "consensus":
        from data.consensus import run_consensus_labels

        consensus = step("consensus labels", lambda: run_consensus_labels(opts.pool, outputs_path, examples_path, run,
                                                                          truth=labels_run.labels_path))
        console.print(f"consensus labels agree with the verifier's on {consensus.agreement['agreement']:.2%} of pairs")

    overrides = [f"run_dir={run}", f"labels={labels_run.labels_path}", f"examples={examples_path}",
                 f"pool={opts.pool}", f"progress={str(opts.progress).lower()}"]
    if opts.max_examples:
        overrides.append(f"max_examples={opts.max_examples}")
    if opts.folds:
        overrides.append(f"folds={opts.folds}")
    train_cfg = load_train_config(opts.train_config, overrides + list(opts.train_overrides))
    train_metrics = step(f"train ({train_cfg.mode}, {train_cfg.backbone.name}, {train_cfg.folds}-fold)",
                         lambda: run_training(train_cfg))

    if consensus is not None:
        step("train on consensus labels", lambda: _train_on_consensus(opts, run, overrides, consensus.labels_path))

    def _evaluate():
        oof = pd.read_parquet(run / OOF_FILE)
        labels = read_labels(labels_run.labels_path)
        held_out = set(oof["example_id"])
        embeddings = None
        if opts.knn and train_cfg.mode == "frozen" and not router_dir(train_cfg).exists():
            console.print("kNN baseline skipped: no saved router encoder (final_fit=false)")
        elif opts.knn and train_cfg.mode == "frozen":
            # A fine-tuned final encoder has seen every label: its neighbours would leak. Frozen only.
            embeddings = encoder_embeddings(router_dir(train_cfg), [examples[e] for e in sorted(held_out)])
        # The pool's recorded outputs: the strategy rows compare the models' decoded calls.
        outputs = read_outputs(outputs_path, models=[m.recording for m in pool.models])
        ev = run_evaluation([lb for lb in labels if lb.example_id in held_out], examples, oof, pool.names,
                            embeddings=embeddings, target=opts.target, budget_per_million=opts.budget_per_million,
                            outputs=outputs, pool=pool, progress=opts.progress)
        if router_dir(train_cfg).exists() and ev.cascade is not None:
            path = write_strategy_policy(router_dir(train_cfg), ev.cascade, oof_matrix(oof, ev.data.example_ids, ev.data.models)[0],
                                         **ev.all_rows)
            console.print(f"strategy policy (≤ 20% of best-single cost) written into {path}")
        context = _context(opts, bench, train_cfg, train_metrics, harness, timings)
        if consensus is not None:
            from evaluation.report.without_truth import without_truth

            context["extra"] = without_truth(ev, consensus.labels_path, run / "consensus" / OOF_FILE, consensus.agreement)
        return ev, context

    ev, context = step("evaluate", _evaluate)

    retest_result = step("test–retest", lambda: _retest(benchmark, data_cfg, pool, ev, examples,
                                                        labels_run.labels_path, context, console))
    extra_metrics, extra_markdown = context.pop("extra", ({}, []))
    if opts.with_pools:
        more_metrics, more_markdown = _companions(opts, run, console)
        extra_metrics, extra_markdown = {**extra_metrics, **more_metrics}, [*extra_markdown, *more_markdown]
    if harness:
        extra_markdown = ["## Labels", "", f"Every label here is {harness}.", "", *extra_markdown]
    report = write_report(ev, run / "report", context=context, retest=retest_result, extra_metrics=extra_metrics,
                          extra_markdown=extra_markdown)
    (run / "reproduce.json").write_text(json.dumps({"timings_s": timings, "report": str(report), "pool": str(opts.pool),
                                                    "benchmark": bench}, indent=2))
    from evaluation.report.tables import headline

    return ReproduceResult(report, headline(ev), timings)


def _step(console: Console, timings: dict[str, float], name: str, fn: Callable[[], Any]) -> Any:
    """`fn()` under a rule naming the step, its seconds kept in `timings` and printed."""
    console.rule(f"[bold]{name}")
    t0 = time.perf_counter()
    out = fn()
    timings[name] = round(time.perf_counter() - t0, 2)
    console.print(f"{name}: {timings[name]:.1f} s", highlight=False)
    return out


def _inputs(opts: ReproduceOptions):
    """(data config, pool, its benchmark, the recordings' folder), each checked before anything runs."""
    data_cfg = load_data_config(opts.data_config)
    pool = load_pool(opts.pool)
    benchmark = get_benchmark(pool.benchmark)
    recordings = benchmark.recordings_path(data_cfg)
    # A benchmark's price file (BFCL v1's) suggests GPU-second prices for its open-weight models.
    price_file = data_cfg.output_path(benchmark.price_file) if benchmark.price_file else None
    check_costable(pool, recordings, pool_path=opts.pool, price_file=price_file)
    check_recorded([m.recording for m in pool.models], recordings, pool_path=opts.pool)
    if opts.labels not in ("truth", "consensus"):
        raise DataError(f"--labels {opts.labels!r}: expected truth or consensus", field="labels")
    return data_cfg, pool, benchmark, recordings


def _train_on_consensus(opts: ReproduceOptions, run: Path, overrides: list[str], labels_path) -> dict:
    """The same recipe on consensus labels only: no auxiliary targets (they are other models' verified labels)."""
    cons_dir = run / "consensus"
    cons_dir.mkdir(exist_ok=True)
    if not (cons_dir / "cache").exists() and (run / "cache").is_dir():
        (cons_dir / "cache").symlink_to((run / "cache").resolve(), target_is_directory=True)  # same features
    cons_cfg = load_train_config(opts.train_config, overrides + list(opts.train_overrides) + [
        f"run_dir={cons_dir}", f"labels={labels_path}", "aux.outputs=null"])
    return run_training(cons_cfg)


def _context(opts: ReproduceOptions, bench: str, train_cfg, train_metrics: dict, harness, timings: dict) -> dict:
    """What the report says of the run: its command, benchmark, pool, training, target, labels and timings."""
    return {
        "command": "switchcraft reproduce" + ("" if opts.pool == ReproduceOptions.pool else f" --pool {opts.pool}")
                   + "".join(f" --with-pool {p}" for p in opts.with_pools),
        "benchmark": bench,
        "pool": str(opts.pool),
        "train": {"mode": train_cfg.mode, "backbone": train_cfg.backbone.name, "folds": train_cfg.folds,
                  "max_examples": train_cfg.max_examples, "macro_auc": train_metrics.get("macro_auc"),
                  "macro_ece": train_metrics.get("macro_ece")},
        "target": opts.target,
        **({"labels": harness} if harness else {}),
        "timings_s": timings,
    }


def _retest(benchmark, data_cfg, pool, ev, examples: dict, labels_path, context: dict, console: Console):
    """Test–retest against the benchmark's earlier recorded run, when there is one (None, and why, when not)."""
    if benchmark.earlier_run is None:
        context["retest_skipped"] = (f"test–retest needs two recorded runs of the same queries; {benchmark.name} has one "
                                     "(BFCL v1 has the 2024-07-25 and 2024-08-11 runs)")
        console.print(context["retest_skipped"], highlight=False)
        return None
    earlier = data_cfg.output_path(benchmark.earlier_run)
    if earlier is None or not Path(earlier).exists():
        console.print(f"test–retest skipped: no earlier run (outputs.{benchmark.earlier_run} in configs/data.yaml)")
        return None
    from evaluation.offline.retest import earlier_models, retest

    if not {m.recording for m in pool.models} & earlier_models(earlier):
        console.print(f"test–retest skipped: no pool model is in the earlier run {earlier}")
        return None
    held = set(ev.data.example_ids)
    try:
        return retest({k: v for k, v in examples.items() if k in held}, pool,
                      [lb for lb in read_labels(labels_path) if lb.example_id in held], earlier)
    except DataError as e:  # a report section, not the job: say why it is missing and go on
        console.print(f"test–retest skipped: {e}", highlight=False)
        context["retest_skipped"] = str(e)
        return None


def _companions(opts: ReproduceOptions, run: Path, console: Console) -> tuple[dict, list[str]]:
    """Each `--with-pool` pool's own reproduce into <run>/<benchmark>/, and its headline as a report section."""
    from dataclasses import replace

    from evaluation.report.tables import headline_markdown

    metrics: dict = {"second_benchmarks": {}}
    lines: list[str] = []
    for path in opts.with_pools:
        bench = load_pool(path).benchmark
        harness = get_benchmark(bench).harness
        console.rule(f"[bold]second benchmark: {bench} ({path})")
        sub = reproduce(replace(opts, pool=Path(path), run_dir=run / bench, with_pools=[], labels="truth"), console)
        rel = sub.report.relative_to(run) if sub.report.is_relative_to(run) else sub.report
        metrics["second_benchmarks"][bench] = {"pool": str(path), "report": str(rel),
                                               "headline": sub.headline.to_dict(orient="records"),
                                               "timings_s": sub.timings}
        lines += [f"## Second benchmark: {bench} (pool {path})", "",
                  *([f"Labels: {harness}.", ""] if harness else []),
                  f"Its own run, held out the same way; every table in [its report]({rel}).", "",
                  headline_markdown(sub.headline), ""]
        if opts.transfer:
            more_metrics, more_lines = _transfer_both_ways(run, run / bench, console)
            metrics["second_benchmarks"][bench]["transfer"] = more_metrics
            lines += more_lines
    return metrics, lines


def _transfer_both_ways(main: Path, second: Path, console: Console) -> tuple[dict, list[str]]:
    """Each run's final router scored on the other's queries (`evaluation.offline.transfer`), into
    <main>/transfer/<a>_to_<b>/, and both tables as a report section."""
    from evaluation.offline.transfer import load_side, transfer, transfer_markdown, write_transfer

    out_metrics: dict = {}
    lines = ["## Transfer between the benchmarks", "",
             "Each final router (every labelled query of its benchmark) scored on the other benchmark's queries over "
             "the models both pools share; non-live → live within BFCL v3 is `switchcraft transfer --split live_` "
             "(docs/transfer.md).", ""]
    for a, b in ((main, second), (second, main)):
        name = f"{a.name}_to_{b.name}"
        t0 = time.perf_counter()
        try:
            result = transfer(load_side(a), load_side(b))
        except (DataError, FileNotFoundError) as e:  # a section, not the job: say why it is missing
            console.print(f"transfer {name} skipped: {e}", highlight=False)
            lines += [f"Transfer {a.name} → {b.name} not measured: {e}", ""]
            continue
        path = write_transfer(result, main / "transfer" / name)
        console.print(f"transfer {a.name} → {b.name}: {path} ({time.perf_counter() - t0:.0f} s)", highlight=False)
        out_metrics[name] = result.table().to_dict(orient="records")
        lines += [f"### {a.name} → {b.name}", "", transfer_markdown(result), ""]
    return out_metrics, lines


def router_dir(cfg) -> Path:
    return Path(cfg.out_dir) if cfg.out_dir else Path(cfg.run_dir) / "router"


def encoder_embeddings(path: Path, examples: list, batch_size: int = 32) -> dict[str, np.ndarray]:
    """The router encoder's pooled embedding of each packed request (for the kNN baseline).

    In frozen mode the encoder is the pretrained one, untouched by the labels,
    so neighbours of a held-out query carry no information about it.
    """
    import torch

    from training.dataset import BucketBatches, pad_batch
    from training.router import load_router

    router = load_router(path)
    ids = [router.pack_request(e.messages, e.tools).ids for e in examples]
    out = np.zeros((len(examples), router.model.hidden_size), dtype=np.float32)
    pad = router.tokenizer.pad_token_id or 0
    with torch.no_grad():
        for rows in BucketBatches(np.array([len(x) for x in ids]), batch_size, shuffle=False):
            x, att = pad_batch([ids[i] for i in rows], pad)
            out[rows] = router.model.encode(x, att).float().numpy()
    return {e.id: out[i] for i, e in enumerate(examples)}
