"""The numpy MiniLM forward matches transformers' model; the hand-built ONNX graph matches numpy."""

import numpy as np

TEXTS = ["What is the area of a triangle with base 10 and height 5?", "convert usd to eur",
         "word " * 300]  # longer than max_length: truncation keeps [CLS] … [SEP]


def _transformers_reference() -> np.ndarray:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from serving.tools.encoder import default_model_dir

    path = str(default_model_dir())
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    batch = tok(TEXTS, return_tensors="pt", padding=True, truncation=True, max_length=128)
    with torch.inference_mode():
        h = model(**batch).last_hidden_state
    m = batch["attention_mask"][..., None].float()
    return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()


def test_numpy_forward_matches_transformers(encoder):
    ref = _transformers_reference()
    ours = encoder.encode(TEXTS)
    assert ours.shape == (3, 384)
    np.testing.assert_allclose((ours * ref).sum(1), 1.0, atol=1e-5)


def test_onnx_graph_matches_transformers(encoder, tmp_path):
    """The graph serving runs, checked against transformers' own outputs (not only against numpy)."""
    from serving.tools.onnx_encoder import OnnxQueryEncoder

    ref = _transformers_reference()
    got = OnnxQueryEncoder.create(encoder, tmp_path).encode(TEXTS)
    np.testing.assert_allclose((got * ref).sum(1), 1.0, atol=1e-5)


def test_onnx_graph_matches_numpy(encoder, tmp_path):
    from serving.tools.onnx_encoder import OnnxQueryEncoder

    onnx_enc = OnnxQueryEncoder.create(encoder, tmp_path)
    assert onnx_enc.model_path.parent == tmp_path  # cached in the run directory, not the package
    np.testing.assert_allclose(onnx_enc.encode(TEXTS), encoder.encode(TEXTS), atol=2e-5)
    assert onnx_enc.count_tokens("refund payment") == encoder.count_tokens("refund payment") == 3  # ref ##und payment


def test_similar_texts_are_closer(encoder):
    v = encoder.encode(["refund a payment", "give the customer their money back", "weather forecast for Paris"])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1


def test_int8_query_encoder_stays_close_to_fp32(encoder, tmp_path):
    from serving.tools.onnx_encoder import OnnxQueryEncoder

    q8 = OnnxQueryEncoder.create(encoder, tmp_path, int8=True)
    assert q8.model_path.name.endswith("-int8.onnx")
    cos = (q8.encode(TEXTS) * encoder.encode(TEXTS)).sum(1)
    assert cos.min() > 0.97


def test_pack_restarts_positions_and_keeps_attention_inside_each_text():
    from serving.tools.encoder import pack

    ids, positions, bias, lengths = pack([[101, 7, 102], [101, 102]])
    assert ids.tolist() == [[101, 7, 102, 101, 102]] and positions.tolist() == [[0, 1, 2, 0, 1]]
    assert lengths.tolist() == [3, 2] and bias.shape == (1, 1, 5, 5)
    assert (bias[0, 0] == 0).tolist() == [[True] * 3 + [False] * 2] * 3 + [[False] * 3 + [True] * 2] * 2


def test_packed_pass_equals_one_pass_per_text(encoder, tmp_path):
    """All asks of a request in one forward pass give each ask's own embedding (numpy and ONNX)."""
    from serving.tools.onnx_encoder import OnnxQueryEncoder

    texts = ["book the Hilton in Paris for two nights", "what is the time difference between NY and LA?", "hi"]
    one_by_one = encoder.encode(texts, batch_size=1)
    np.testing.assert_allclose(encoder.encode_packed(texts), one_by_one, atol=1e-5)
    np.testing.assert_allclose(encoder.encode_packed(texts, max_length=5), encoder.encode(texts, max_length=5), atol=1e-5)
    np.testing.assert_allclose(OnnxQueryEncoder.create(encoder, tmp_path).encode_packed(texts), one_by_one, atol=3e-5)
    assert encoder.encode_packed([]).shape == (0, 384)


def test_grouped_packing_bounds_each_pass_and_changes_nothing(encoder):
    from serving.tools.encoder import embed_grouped

    texts = ["refund the payment of order 42", "what is the weather in Paris tomorrow", "list invoices"]
    ids = [encoder.token_ids(t) for t in texts]
    passes = []

    def forward(i, p, b):
        passes.append(i.shape[1])
        return encoder.forward(i, p, b)

    out = embed_grouped(ids, 384, forward, pack_tokens=len(ids[0]) + len(ids[1]))
    assert passes == [len(ids[0]) + len(ids[1]), len(ids[2])]  # the first two share a pass, the third would overflow
    np.testing.assert_allclose(out, encoder.encode(texts, batch_size=1), atol=1e-5)


def test_span_vectors_pool_their_own_tokens_from_one_pass(encoder):
    """Late chunking: each span's vector is the mean of its word pieces' states in the pass over the whole text."""
    text = "Book a hotel in Paris. Then convert 100 usd to eur"
    spans = [(0, 23), (23, len(text))]
    ids, owner, n = encoder.span_tokens(text, spans)
    assert n == 2 and owner[0] == owner[-1] == -1  # [CLS] and [SEP] belong to no span
    assert list(owner[1:-1]) == sorted(owner[1:-1]) and set(owner[1:-1]) == {0, 1}
    rows = encoder.encode_spans([text], [spans])[0]
    h = encoder.forward(np.array([ids]), np.arange(len(ids))[None], np.zeros((1, 1, 1, len(ids)), np.float32))[0]
    for j in (0, 1):
        v = h[owner == j].mean(0)
        np.testing.assert_allclose(rows[1 + j], v / np.linalg.norm(v), atol=1e-5)
    np.testing.assert_allclose(rows[0], encoder.encode([text])[0], atol=1e-5)  # row 0: the whole text
    cut = encoder.encode_spans([text], [spans], max_length=6)[0]  # the second span is cut off: whole vector
    np.testing.assert_allclose(cut[2], cut[0], atol=1e-6)


def test_a_trained_encoder_gets_its_own_name(encoder, tmp_path):
    import shutil

    from serving.tools.encoder import ENCODER_ID, MiniLMEncoder, default_model_dir

    assert encoder.name == ENCODER_ID
    copy = tmp_path / "tools_x" / "model"
    shutil.copytree(default_model_dir(), copy)
    named = MiniLMEncoder.load(copy).name
    assert named.startswith("tools_x-model-") and len(named) == len("tools_x-model-") + 12
