"""The tool-routing config (`configs/tools.yaml`): catalog, index, retrieval, groups, policy.

    from serving.tools.config import load_tools_config
    cfg = load_tools_config("configs/tools.yaml")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from data.yaml_config import apply_overrides, read_yaml, validate_model
from serving.tools.cards import FIELDS
from serving.tools.policy import AccessPolicy
from training.tool_retriever import RetrieverTrainConfig


class FieldWeights(BaseModel):
    """RRF weights of one signal's per-field rankings (card name, description, parameters); 0: not used."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: float = Field(default=0.0, ge=0)
    description: float = Field(default=0.0, ge=0)
    parameters: float = Field(default=0.0, ge=0)

    def weighted(self) -> list[tuple[str, float]]:
        """(field, weight) of the fields used, in FIELDS order."""
        return [(f, getattr(self, f)) for f in FIELDS if getattr(self, f) > 0]


class SiblingFill(BaseModel):
    """Sibling fill (serving/tools/siblings.py): of K places, ceil(head × K) in score order, then the other tools
    of those tools' namespaces (best first), then the rest."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    head: float = Field(gt=0, lt=1, description="share of the K places kept in score order")
    # Namespaces (fnmatch patterns) whose tools are one service's endpoints; tools of any other namespace
    # (or none) have no siblings.
    namespaces: list[str] = Field(default_factory=lambda: ["*"], min_length=1)


class RetrievalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    top_k: int = Field(default=5, ge=1)
    rrf_k: float = Field(default=60.0, gt=0)
    w_bm25: float = Field(default=1.0, ge=0)
    w_dense: float = Field(default=1.0, ge=0)
    # Per-field rankings beside the whole-text ones (serving/tools/index.py): BM25 over a card's name,
    # description or parameters alone, and the cosine to that field's embedding. All 0 (the default):
    # exactly the two-signal fusion above.
    w_bm25_fields: FieldWeights = Field(default_factory=FieldWeights)
    w_dense_fields: FieldWeights = Field(default_factory=FieldWeights)
    # Query embeddings: int8 is ~2.4x faster with the same recall (see serving/tools/onnx_encoder.py).
    query_precision: Literal["fp32", "int8"] = "int8"
    query_threads: int = Field(default=1, ge=1, description="ONNX Runtime threads embedding a query (latency at low load vs cores)")
    overlap_bm25: bool = Field(default=True, description="score BM25 on the calling thread while the query embeds on another")
    # Multi-intent retrieval (serving/tools/intents.py): a request asking for several things is
    # split into its asks; each is retrieved on its own and the rankings merged. 1 = off.
    max_intents: int = Field(default=6, ge=1, description="asks retrieved separately per request (1: whole request only)")
    intent_weight: float = Field(default=0.95, gt=0, le=1, description="an ask's fused score relative to the whole request's")
    k_per_intent: int = Field(default=2, ge=1, description="exposed tools grow to this many per ask when a request has several")
    # "embed": the whole request is embedded too; "mean_of_asks": its vector is the asks' mean
    # (one embedding pass instead of two: about half the time for a request that makes several asks).
    whole_vector: Literal["embed", "mean_of_asks"] = "embed"
    # Word pieces embedded per request, shared by the texts embedded (the whole request and/or its
    # asks, each at least 16); null: every text up to the encoder's 128. Bounds the embedding time.
    query_token_budget: int | None = Field(default=None, ge=16)
    # The texts a request embeds (whole request, asks) go through the encoder packed into one row while
    # their word pieces add up to at most this (positions restart per text, attention stays inside each):
    # one call instead of one per ask. A packed row's attention is (total)², so longer runs split. 0: one call a text.
    pack_tokens: int = Field(default=64, ge=0)
    # Shortlist fusion: each signal credits only its top-N cards (ranks 1..N, the rest 0) instead of ranking every
    # visible card; null: every visible card ranked (the exact RRF). docs/tool_routing.md, "Speed levers".
    shortlist: int | None = Field(default=None, ge=1)
    # Sibling fill: for catalogs whose namespace is one service (RapidAPI tools, an MCP server); null: off.
    sibling_fill: SiblingFill | None = None

    @model_validator(mode="after")
    def _some_signal(self):
        if self.w_bm25 == 0 and self.w_dense == 0 and not self.w_bm25_fields.weighted() and not self.w_dense_fields.weighted():
            raise ValueError("w_bm25, w_dense and every per-field weight are 0: give at least one retrieval signal a weight")
        return self


class GroupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_groups: int = Field(default=3, ge=1)
    probe: int = Field(default=20, ge=1, description="top fused tools whose groups are candidates")
    temperature: float = Field(default=0.05, gt=0, description="softmax temperature over group cosines")
    confidence_threshold: float = Field(default=0.5, ge=0, le=1, description="below: widen")
    min_confidence: float = Field(default=0.2, ge=0, le=1, description="below after widening: safe default set")
    widen_groups: int = Field(default=2, ge=1, description="factor on max_groups when widening")
    widen_k: int = Field(default=2, ge=1, description="factor on top_k when widening")
    expand_k: int = Field(default=10, ge=1, description="tools added by one request_group")
    suggest_groups: int = Field(default=20, ge=0, description="groups named in request_group's description")

    @model_validator(mode="after")
    def _ordered(self):
        if self.min_confidence > self.confidence_threshold:
            raise ValueError("min_confidence must not exceed confidence_threshold")
        return self


class ToolsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalog: list[str] = Field(default_factory=list)
    default_risk: str | None = Field(default=None, description="risk for cards that do not say (function docs)")
    duplicates: Literal["error", "rename"] = "error"  # a second tool of one name: error, or keep it as name~2
    index_dir: str = "runs/tools/index"
    run_dir: str = "runs/tools"
    # The trained retriever (`switchcraft tools train` writes <train.out_dir>/model): tools and queries are
    # embedded with it. null: the base all-MiniLM-L6-v2.
    encoder: str | None = None
    # A shallower query encoder distilled from it (<train.out_dir>/query_model); null: queries use `encoder`.
    query_encoder: str | None = None
    pinned: list[str] = Field(default_factory=list)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    groups: GroupConfig = Field(default_factory=GroupConfig)
    policy: AccessPolicy = Field(default_factory=AccessPolicy)
    train: RetrieverTrainConfig = Field(default_factory=RetrieverTrainConfig)
    # Per benchmark catalog (`switchcraft tools eval`, `fit-fusion`): retrieval settings that differ there from
    # `retrieval:` above, e.g. {stabletoolbench: {sibling_fill: {head: 0.5}}}. The served catalog uses `retrieval:`.
    catalog_retrieval: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _query_encoder_needs_encoder(self):
        if self.query_encoder and not self.encoder:
            raise ValueError("query_encoder is distilled from a trained encoder: set encoder too (or neither)")
        return self

    @model_validator(mode="after")
    def _catalog_retrieval_valid(self):
        for name in self.catalog_retrieval:
            try:
                self.retrieval_for(name)
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                raise ValueError(f"catalog_retrieval.{name}.{where}: {err['msg']}") from None
        return self

    def retrieval_for(self, catalog: str) -> RetrievalConfig:
        """`retrieval:` with the overrides of `catalog_retrieval[catalog]` (none: `retrieval` itself)."""
        extra = self.catalog_retrieval.get(catalog)
        if not extra:
            return self.retrieval
        return RetrievalConfig.model_validate({**self.retrieval.model_dump(), **extra})


def load_tools_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> ToolsConfig:
    """Load (None: the defaults), apply `key=value` overrides (`retrieval.max_intents=1`), validate."""
    raw = read_yaml(path, hint="see configs/tools.yaml") if path is not None else {}
    return validate_model(path or "<command line>", apply_overrides(raw, list(overrides)), ToolsConfig, list(overrides))
