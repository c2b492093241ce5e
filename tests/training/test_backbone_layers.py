"""backbone.layers: the first N layers of an encoder, for a faster router; the saved router reloads as trained."""

import pytest
import torch

from training.config import BackboneSettings
from training.model import load_backbone, truncate_layers


def test_minilm_keeps_its_first_layers_and_their_weights():
    full, _ = load_backbone(BackboneSettings())
    short, tok = load_backbone(BackboneSettings(layers=2))
    assert len(full.encoder.layer) == 6 and len(short.encoder.layer) == 2 and short.config.num_hidden_layers == 2
    for a, b in zip(full.encoder.layer[:2].parameters(), short.encoder.layer.parameters()):
        assert torch.equal(a, b)
    batch = tok(["what is the weather in Paris"], return_tensors="pt")
    with torch.no_grad():
        out = short(**batch).last_hidden_state
        ref = full(**batch, output_hidden_states=True).hidden_states[2]  # after the second layer
    torch.testing.assert_close(out, ref)


def test_saved_truncated_encoder_reloads_with_its_depth(tmp_path):
    from transformers import AutoModel

    short, _ = load_backbone(BackboneSettings(layers=3))
    short.save_pretrained(tmp_path / "encoder")
    again = AutoModel.from_pretrained(tmp_path / "encoder", local_files_only=True)
    assert len(again.encoder.layer) == 3


def test_distilbert_style_and_errors():
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

    d = DistilBertModel(DistilBertConfig(n_layers=3, dim=32, hidden_dim=64, n_heads=2))
    truncate_layers(d, 1)
    assert len(d.transformer.layer) == 1 and d.config.n_layers == 1
    b = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64))
    with pytest.raises(ValueError, match="has only 2 layers"):
        truncate_layers(b, 3, "tiny")
    with pytest.raises(ValueError, match="cannot find the layer stack"):
        truncate_layers(torch.nn.Linear(2, 2), 1, "linear")
    with pytest.raises(ValueError):
        BackboneSettings(layers=0)
