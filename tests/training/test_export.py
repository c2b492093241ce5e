"""ONNX export: parity with PyTorch on real packed BFCL v1 requests, named dynamic axes, INT8, the Triton repository.

    .venv/bin/python -m pytest tests/training/test_export.py -q

The router under test is built with the training stage's real code (RouterModel,
save_router, packing, metadata scaling) around a tiny random 2-layer BERT and
MiniLM's real WordPiece tokenizer, so packing is exactly what production does
and the export takes seconds. The router and its export are session fixtures (tests/conftest.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.routers import N_REQUESTS, REPO, decide_with
from training.metadata import FEATURE_NAMES

# --- the tests ---------------------------------------------------------------------------------------
def test_fp32_matches_pytorch_and_keeps_every_decision(exported, tiny_router_dir, bfcl_requests):
    from training.export import RequestEncoder, ort_session
    from training.router import load_router

    out, report = exported
    assert report.n_requests == N_REQUESTS
    assert report.max_abs_diff_fp32 <= 1e-4
    assert report.decisions_equal_fp32 == 1.0
    assert report.fused_ops.get("Attention") == 2  # both layers fused: the eager-attention export took
    # Independently of the report: the graph vs Router.predict (the training stage's own inference path).
    router = load_router(tiny_router_dir)
    torch_p = np.stack([router.predict(messages=m, tools=t) for m, t in bfcl_requests])
    enc = RequestEncoder.from_dir(out)
    sess = ort_session(out / "router.onnx", threads=1)
    onnx_p = np.concatenate([sess.run(["probabilities"], enc.batch([r]))[0] for r in bfcl_requests])
    assert np.abs(torch_p - onnx_p).max() <= 1e-4
    decide = decide_with(router.info)
    assert (decide(torch_p) == decide(onnx_p)).all()
    assert len(set(decide(onnx_p))) > 1, "the test router should not pick one model for everything"


def test_graph_has_named_inputs_and_dynamic_batch_and_sequence_axes(exported, bfcl_requests):
    from training.export import RequestEncoder, ort_session

    out, _ = exported
    sess = ort_session(out / "router.onnx", threads=1)
    inputs = {i.name: i.shape for i in sess.get_inputs()}
    assert list(inputs) == ["input_ids", "attention_mask", "metadata"]
    assert all(isinstance(d, str) for d in inputs["input_ids"]) and inputs["metadata"][1] == len(FEATURE_NAMES)
    assert [o.name for o in sess.get_outputs()] == ["probabilities"]
    # One padded batch of different lengths == one request at a time (mean pooling ignores padding).
    enc = RequestEncoder.from_dir(out)
    batch = enc.batch(bfcl_requests[:5], pad_to=300)
    assert batch["input_ids"].shape == (5, 300)
    together = sess.run(["probabilities"], batch)[0]
    alone = np.concatenate([sess.run(["probabilities"], enc.batch([r]))[0] for r in bfcl_requests[:5]])
    assert together.shape == (5, 8) and np.abs(together - alone).max() < 1e-5
    assert ((together > 0) & (together < 1)).all()


def test_int8_is_reported_with_agreement_and_speed(exported):
    out, report = exported
    assert (out / "router.int8.onnx").stat().st_size < (out / "router.onnx").stat().st_size / 2
    q = report.int8
    assert q is not None and q["p50_int8_ms"] > 0 and q["timed_requests"] == N_REQUESTS
    # INT8 must keep the chosen model on real requests, not merely report how often it does
    assert q["decision_agreement"] >= 0.97 and "rejected" not in q
    assert q["max_abs_diff"] < 0.2  # quantised, not broken
    saved = json.loads((out / "export.json").read_text())
    assert saved["int8"]["decision_agreement"] == q["decision_agreement"]
    info = json.loads((out / "router.json").read_text())
    assert info["onnx"]["int8"] == "router.int8.onnx" and info["onnx"]["n_models"] == 8


def test_int8_below_the_agreement_bar_is_kept_but_never_served(tiny_router_dir, bfcl_requests, tmp_path):
    from serving.client import RouterClient
    from training.export import export_router

    info = json.loads((tiny_router_dir / "router.json").read_text())
    out = tmp_path / "onnx"
    report = export_router(tiny_router_dir, out, requests=bfcl_requests[:4], int8=True, decide=decide_with(info),
                           threads=1, min_int8_agreement=1.01)  # a bar no graph can pass
    assert "needs ≥ 101% agreement" in report.int8["rejected"]
    assert (out / "router.int8.onnx").exists()  # kept for inspection
    assert json.loads((out / "router.json").read_text())["onnx"]["int8"] is None
    with pytest.raises(FileNotFoundError, match="no INT8 graph"):
        RouterClient.from_dir(out, int8=True)
    unchecked = export_router(tiny_router_dir, tmp_path / "onnx2", requests=bfcl_requests[:2], int8=True, threads=1)
    assert "cannot be checked" in unchecked.int8["rejected"]


def test_export_refuses_without_requests_and_reports_parity_failures(tiny_router_dir, tmp_path):
    from training.export import ExportReport, export_router

    with pytest.raises(ValueError, match="at least one request"):
        export_router(tiny_router_dir, tmp_path / "x", requests=[])
    bad = ExportReport(n_requests=3, max_abs_diff_fp32=3e-3, decisions_equal_fp32=1.0)
    with pytest.raises(ValueError, match="differs from PyTorch"):
        bad.check()
    with pytest.raises(ValueError, match="changes 50.0% of decisions"):
        ExportReport(n_requests=2, max_abs_diff_fp32=0.0, decisions_equal_fp32=0.5).check()


def test_the_repository_export_writes_is_for_the_routers_own_pool(exported, tmp_path):
    from serving.triton import model_config, write_model_repository

    out, _ = exported
    n_models = len(json.loads((out / "router.json").read_text())["models"])  # the tiny router's: the 2024 pool, 8
    written = write_model_repository(out, tmp_path / "repo", max_batch_size=16)
    for variant in ("gpu", "cpu"):  # only the Python backend's model.py is checked in: the configs are per pool
        assert not (REPO / "serving" / "model_repository" / variant / "router" / "config.pbtxt").exists()
        assert f"dims: [ {n_models} ]" in (written / variant / "router" / "config.pbtxt").read_text()
    assert (written / "gpu" / "router" / "config.pbtxt").read_text() == model_config(
        "gpu", n_models=n_models, n_meta=len(FEATURE_NAMES), max_batch_size=16)
    gpu = (written / "gpu" / "router" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in gpu and "KIND_GPU" in gpu and "max_batch_size: 16" in gpu
    assert "max_queue_delay_microseconds" in gpu and 'name: "tensorrt"' in gpu
    cpu = (written / "cpu" / "router" / "config.pbtxt").read_text()
    assert 'backend: "python"' in cpu and "allow_ragged_batch: true" in cpu and "dims: [ 8 ]" in cpu
    assert (written / "cpu" / "router" / "1" / "model.py").exists()
    assert (written / "gpu" / "router" / "1" / "model.onnx").stat().st_size == (out / "router.onnx").stat().st_size
    assert json.loads((written / "router.json").read_text())["onnx"]["n_meta"] == len(FEATURE_NAMES)
    with pytest.raises(ValueError, match="variant"):
        model_config("tpu", n_models=8, n_meta=len(FEATURE_NAMES))


def test_export_command_writes_onnx_and_repository(tiny_router_dir, tmp_path, shared_data):
    import typer
    from typer.testing import CliRunner

    from switchcraft.cli_serve import register

    app = typer.Typer()
    register(app)
    out = tmp_path / "onnx"
    args = ["export", str(tiny_router_dir), "--out", str(out), "--triton", "--validate", "4",
            "--data-root", str(shared_data)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "identical decisions 100.0%" in res.output
    assert (out / "model_repository" / "cpu" / "router" / "1" / "model.onnx").exists()
    res = CliRunner().invoke(app, ["export", str(tmp_path / "missing"), "--validate", "2", "--data-root", str(shared_data)])
    assert res.exit_code == 1 and "no router.json; train a router first" in " ".join(res.output.split())
