"""Backbones and pooling.

    .venv/bin/python -m pytest tests/training/test_model.py -q
"""

from __future__ import annotations

import pytest
import torch

from training.config import BackboneSettings
from training.model import RouterModel, load_backbone


def test_segment_pooling_averages_user_tools_and_turns_apart(tiny_backbone):
    encoder, tok = load_backbone(BackboneSettings(name=str(tiny_backbone)))
    cls, sep, pad = tok.cls_token_id, tok.sep_token_id, tok.pad_token_id
    model = RouterModel(encoder, n_meta=2, n_models=3, pooling="segments", sep_token_id=sep).eval()
    ids = torch.tensor([[cls, 40, 41, sep, 42, sep, sep, pad]])  # user: 40 41, tools: 42, no other turns
    att = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        hidden = encoder(input_ids=ids, attention_mask=att).last_hidden_state[0]
        pooled = model.encode(ids, att)[0]
    h = model.hidden_size
    assert pooled.shape == (4 * h,) and model.feature_size == 4 * h
    user, tools = hidden[1:3].mean(0), hidden[4]
    assert torch.allclose(pooled[:h], user, atol=1e-6)
    assert torch.allclose(pooled[h : 2 * h], tools, atol=1e-6)
    assert torch.equal(pooled[2 * h : 3 * h], torch.zeros(h))  # an empty segment pools to zeros
    assert torch.allclose(pooled[3 * h :], user * tools, atol=1e-6)
    assert model(torch.zeros(1, 2), input_ids=ids, attention_mask=att).shape == (1, 3)
    with pytest.raises(ValueError, match="sep_token_id"):
        RouterModel(encoder, n_meta=2, n_models=3, pooling="segments")


def test_minilm_alias_loads_the_shipped_weights():
    encoder, tok = load_backbone(BackboneSettings(name="all-MiniLM-L6-v2"))
    assert encoder.config.hidden_size == 384 and encoder.config.num_hidden_layers == 6
    assert tok.vocab_size == 30522


def test_distilbert_needs_weights_or_an_explicit_random_init():
    with pytest.raises(FileNotFoundError, match="init=random"):
        load_backbone(BackboneSettings(name="distilbert-base-uncased"))
    encoder, tok = load_backbone(BackboneSettings(name="distilbert-base-uncased", init="random", pooling="cls"))
    assert type(encoder).__name__ == "DistilBertModel" and encoder.config.dim == 768
    # MiniLM's tokenizer stands in: the same uncased WordPiece vocabulary as distilbert-base-uncased
    assert tok.vocab_size == encoder.config.vocab_size == 30522
    assert tok.tokenize("Routing tool calls") == ["routing", "tool", "calls"]
