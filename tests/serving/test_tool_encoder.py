"""The numpy MiniLM forward matches transformers' model; the hand-built ONNX graph matches numpy."""

import numpy as np
import pytest

TEXTS = ["What is the area of a triangle with base 10 and height 5?", "convert usd to eur",
         "word " * 300]  # longer than max_length: truncation keeps [CLS] … [SEP]


def test_numpy_forward_matches_transformers(encoder):
    torch = pytest.importorskip("torch")
    from transformers import AutoModel, AutoTokenizer

    from serving.tools.encoder import default_model_dir

    path = str(default_model_dir())
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    batch = tok(TEXTS, return_tensors="pt", padding=True, truncation=True, max_length=128)
    with torch.inference_mode():
        h = model(**batch).last_hidden_state
    m = batch["attention_mask"][..., None].float()
    ref = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    ours = encoder.encode(TEXTS)
    assert ours.shape == (3, 384)
    np.testing.assert_allclose((ours * ref).sum(1), 1.0, atol=1e-5)


def test_onnx_graph_matches_numpy(encoder, tmp_path):
    pytest.importorskip("onnxruntime")
    from serving.tools.onnx_encoder import OnnxQueryEncoder

    onnx_enc = OnnxQueryEncoder.create(encoder, tmp_path)
    assert onnx_enc.model_path.parent == tmp_path  # cached in the run directory, not the package
    np.testing.assert_allclose(onnx_enc.encode(TEXTS), encoder.encode(TEXTS), atol=2e-5)
    assert onnx_enc.count_tokens("refund payment") == encoder.count_tokens("refund payment") == 3  # ref ##und payment


def test_similar_texts_are_closer(encoder):
    v = encoder.encode(["refund a payment", "give the customer their money back", "weather forecast for Paris"])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1


def test_int8_query_encoder_stays_close_to_fp32(encoder, tmp_path):
    pytest.importorskip("onnxruntime")
    from serving.tools.onnx_encoder import OnnxQueryEncoder

    q8 = OnnxQueryEncoder.create(encoder, tmp_path, int8=True)
    assert q8.model_path.name.endswith("-int8.onnx")
    cos = (q8.encode(TEXTS) * encoder.encode(TEXTS)).sum(1)
    assert cos.min() > 0.97
