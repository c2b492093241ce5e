"""The tool retriever's fine-tuning on a tiny throwaway sample: it runs, writes what serving reads, learns."""

import json

import numpy as np
import pytest

from training.tool_retriever import Pair, RetrieverTrainConfig, TrainDataConfig, fit

PAIRS = [
    Pair("refund my last payment", "refund payment. refund a captured payment", "charge card. charge a card", "t"),
    Pair("what's the weather in Paris", "weather forecast. forecast for a city", "list invoices. invoices of a customer", "t"),
    Pair("send the invoice to ACME", "issue invoice. issue a new invoice", "refund payment. refund a captured payment", "t"),
    Pair("restart the web server", "restart service. restart a service", "service status. health of a service", "t"),
]


@pytest.mark.slow
def test_fit_writes_a_model_serving_can_load(tmp_path):
    from serving.tools.encoder import MiniLMEncoder, default_model_dir

    cfg = RetrieverTrainConfig(out_dir=str(tmp_path / "tools_r"), batch_size=4, epochs=2, max_seq_length=16,
                               learning_rate=1e-4, threads=1, query_layers=1, distil_epochs=1, distil_learning_rate=5e-4)
    base = MiniLMEncoder.load()
    out = fit(PAIRS, cfg, default_model_dir(), log=lambda *_: None, distil_texts=["refund it", "restart the web server"])
    record = json.loads((out / "train.json").read_text())
    assert record["pairs"] == 4 and record["pairs_by_source"] == {"t": 4} and record["loss"]
    assert record["query_model"]["layers"] == 1 and "sentence_transformers" in record["versions"]
    # The student learns every query and the extra texts once each, at its own learning rate.
    assert record["query_model"]["texts"] == 5 and record["query_model"]["learning_rate"] == 5e-4
    trained, student = MiniLMEncoder.load(out / "model"), MiniLMEncoder.load(out / "query_model")
    assert trained.n_layers == 6 and student.n_layers == 1 and trained.name != base.name
    q, t = [p.query for p in PAIRS], [p.positive for p in PAIRS]
    # Two steps at a high rate move the weights: the embeddings change, and stay unit norm.
    assert not np.allclose(trained.encode(q), base.encode(q), atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(student.encode(q), axis=1), 1.0, atol=1e-5)
    assert student.encode(q).shape == trained.encode(t).shape == (4, 384)


def test_config_rejects_the_model_routers_run_dir():
    with pytest.raises(ValueError, match="runs/default"):
        RetrieverTrainConfig(out_dir="runs/default")
    assert TrainDataConfig().sources == ["xlam", "glaive", "bfcl_live", "seal_tools_dev", "metatool"]


def test_no_pairs_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no training pairs"):
        fit([], RetrieverTrainConfig(out_dir=str(tmp_path)), "unused")
