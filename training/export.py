"""ONNX export of a trained router, checked against PyTorch on real packed requests.

    switchcraft export runs/default/router --out runs/default/router_onnx [--int8] [--triton]

    report = export_router("runs/default/router", "runs/default/router_onnx", examples=bfcl_v1[:200])
    encoder = RequestEncoder.from_dir("runs/default/router_onnx")   # packing + metadata, no torch
    ids, mask, meta = encoder.batch([(messages, tools)])

The graph takes `input_ids` [batch, seq] int64, `attention_mask` [batch, seq]
int64 and `metadata` [batch, n_meta] float32 (already scaled with the
router.json scaler) and returns `probabilities` [batch, n_models] float32:
sigmoid of the temperature-scaled logits — the head's, blended with the
lexical branch's when the router has one (computed in-graph from
`input_ids`) — so the graph alone gives exactly `Router.predict`. Batch and
sequence axes are dynamic.

The output folder is a self-contained serving router: `router.onnx` (fp32,
ONNX Runtime's transformer fusions applied offline), `router.int8.onnx` when
asked, `tokenizer/`, `router.json` (the training one plus an `onnx` section)
and `export.json` (the validation report). Torch is only needed to export;
serving reads this folder with onnxruntime and tokenizers alone.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.config import PackingSettings
from training.metadata import MetadataScaler, metadata_row, request_metadata
from training.packing import pack_request

INPUTS = ("input_ids", "attention_mask", "metadata")
OUTPUT = "probabilities"
FP32_FILE, INT8_FILE, RAW_FILE = "router.onnx", "router.int8.onnx", "router.unoptimized.onnx"
REPORT_FILE = "export.json"
Request = tuple[list[Any], list[Any] | None]  # (messages, tools), as schema objects or dicts


# --- request → model inputs (shared by validation, the client and the benchmark) ---------------
class RequestEncoder:
    """Packing + metadata exactly as the router was trained: tokenizer files and router.json only."""

    def __init__(self, tokenizer, info: dict[str, Any]) -> None:
        self.tokenizer = tokenizer
        self.info = info
        self.packing = PackingSettings.model_validate(info["packing"])
        self.scaler = MetadataScaler.from_json(info["metadata"])
        self.pad_id = tokenizer.pad_token_id or 0

    @classmethod
    def from_dir(cls, path: str | Path) -> RequestEncoder:
        from transformers import AutoTokenizer

        path = Path(path)
        info = json.loads((path / "router.json").read_text())
        return cls(AutoTokenizer.from_pretrained(path / "tokenizer", local_files_only=True), info)

    def encode(self, messages: list[Any], tools: list[Any] | None) -> tuple[list[int], np.ndarray]:
        """(token ids, scaled metadata vector) of one request."""
        ids = pack_request(messages, tools, self.tokenizer, self.packing).ids
        raw = metadata_row(request_metadata(messages, tools, self.tokenizer))
        return ids, self.scaler.transform(np.array([raw]))[0]

    def batch(self, requests: Sequence[Request], pad_to: int | None = None) -> dict[str, np.ndarray]:
        """Model inputs for several requests, padded to the longest (or to `pad_to`)."""
        return pad_batch([self.encode(m, t) for m, t in requests], self.pad_id, pad_to)


def pad_batch(encoded: Sequence[tuple[list[int], np.ndarray]], pad_id: int, pad_to: int | None = None) -> dict[str, np.ndarray]:
    width = max(pad_to or 0, max(len(ids) for ids, _ in encoded))
    input_ids = np.full((len(encoded), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(encoded), width), dtype=np.int64)
    for k, (ids, _) in enumerate(encoded):
        input_ids[k, : len(ids)] = ids
        mask[k, : len(ids)] = 1
    meta = np.stack([m for _, m in encoded]).astype(np.float32)
    return {"input_ids": input_ids, "attention_mask": mask, "metadata": meta}


def ort_session(path: str | Path, threads: int | None = None, providers: list[str] | None = None,
                optimize: bool = True):
    """An ONNX Runtime session; CUDA when onnxruntime-gpu sees a device, else CPU."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # the CPU EP's "some nodes were not assigned" notes are noise here
    # Two sessions are timed side by side: busy-waiting workers of one would slow the other.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if providers is None:
        available = ort.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
    return ort.InferenceSession(str(path), opts, providers=providers)


# --- export --------------------------------------------------------------------------------------
def router_graph(router):
    """The router as one torch module: (input_ids, attention_mask, metadata) → probabilities (`Router.net`)."""
    return router.net.eval()


def export_onnx(router, path: str | Path, opset: int = 17) -> Path:
    """Write the fp32 graph with named inputs/outputs and dynamic batch and sequence axes."""
    import torch

    encoder = router.model.encoder
    if hasattr(encoder, "set_attn_implementation"):
        # Eager attention exports as plain MatMul/Softmax, which ORT fuses into one Attention op; SDPA does not fuse.
        encoder.set_attn_implementation("eager")
    graph = router_graph(router)
    n_meta = len(router.scaler.names)
    example = (torch.ones(2, 16, dtype=torch.long), torch.ones(2, 16, dtype=torch.long), torch.zeros(2, n_meta))
    dynamic = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
               "metadata": {0: "batch"}, OUTPUT: {0: "batch"}}
    path = Path(path)
    with torch.no_grad():
        # The TorchScript exporter: the DESIGN measurement found its graph ~10% faster in ORT than dynamo's.
        torch.onnx.export(graph, example, str(path), input_names=list(INPUTS), output_names=[OUTPUT],
                          dynamic_axes=dynamic, opset_version=opset, dynamo=False, do_constant_folding=True)
    return path


def optimize_onnx(src: str | Path, dst: str | Path, encoder_config) -> dict[str, int]:
    """ONNX Runtime's offline transformer fusions (attention, layer norm, GELU); returns the fused op counts."""
    from onnxruntime.transformers.optimizer import optimize_model

    heads = getattr(encoder_config, "num_attention_heads", None) or getattr(encoder_config, "n_heads", 0)
    hidden = getattr(encoder_config, "hidden_size", None) or getattr(encoder_config, "dim", 0)
    opt = optimize_model(str(src), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=1)
    opt.save_model_to_file(str(dst))
    return {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}


def quantize_int8(src: str | Path, dst: str | Path) -> Path:
    """Dynamic INT8 (weights int8 per channel, activations quantised at run time)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # reduce_range: 7-bit weights avoid the u8×s8 overflow of AVX2 machines without VNNI (like these).
    # DefaultTensorType: shape inference cannot type the outputs of the fused com.microsoft ops.
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return Path(dst)


# --- validation -----------------------------------------------------------------------------------
def run_session(session, requests_inputs: list[dict[str, np.ndarray]]) -> np.ndarray:
    return np.concatenate([session.run([OUTPUT], feed)[0] for feed in requests_inputs])


def timed_p50_ms(session, feeds: list[dict[str, np.ndarray]], repeats: int = 1) -> float:
    """Median latency of one batch-1 call, milliseconds."""
    times = []
    for _ in range(repeats):
        for feed in feeds:
            t0 = time.perf_counter()
            session.run([OUTPUT], feed)
            times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


@dataclass
class ExportReport:
    n_requests: int
    max_abs_diff_fp32: float
    decisions_equal_fp32: float | None  # share of identical decisions PyTorch vs ONNX fp32
    fused_ops: dict[str, int] = field(default_factory=dict)
    int8: dict[str, Any] | None = None  # max_abs_diff, decision_agreement, p50 fp32/int8 ms, speedup
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def check(self, tol: float = 1e-4) -> None:
        if self.max_abs_diff_fp32 > tol:
            raise ValueError(f"ONNX fp32 differs from PyTorch by {self.max_abs_diff_fp32:.2e} > {tol:g}")
        if self.decisions_equal_fp32 is not None and self.decisions_equal_fp32 < 1.0:
            raise ValueError(f"ONNX fp32 changes {1 - self.decisions_equal_fp32:.1%} of decisions")


Decide = Callable[[np.ndarray], np.ndarray]  # probabilities [n, models] → chosen column per row
MIN_INT8_AGREEMENT = 0.97  # share of requests whose chosen model INT8 must keep, or it is not served


def copy_novelty(src: str | Path, out: str | Path, info: dict) -> None:
    """The novelty index router.json names (training/novelty.py), beside the copied router.json."""
    if info.get("novelty"):
        name = info["novelty"].get("file", "novelty.npz")
        if Path(src).resolve() != Path(out).resolve():
            shutil.copy(Path(src) / name, Path(out) / name)


def export_router(router_dir: str | Path, out_dir: str | Path, *, requests: Sequence[Request],
                  int8: bool = False, decide: Decide | None = None, opset: int = 17, threads: int | None = None,
                  tol: float = 1e-4, min_int8_agreement: float = MIN_INT8_AGREEMENT) -> ExportReport:
    """Export, fuse, optionally quantise, and validate on `requests` (real packed requests, batch 1).

    `decide` turns probabilities into chosen models (serving's policy; passed in because
    training must not import serving); without it only probabilities are compared.
    Raises when fp32 exceeds `tol` or changes a decision. An INT8 graph whose decisions
    agree with fp32 on fewer than `min_int8_agreement` of the requests (or that cannot be
    checked because no `decide` was given) is kept on disk for inspection but not entered
    in router.json, so neither the in-process client nor the Triton repository serves it.
    """
    from training.router import load_router

    t0 = time.perf_counter()
    if not requests:
        raise ValueError("validation needs at least one request (e.g. BFCL v1 examples)")
    router = load_router(router_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = export_onnx(router, out / RAW_FILE, opset)
    fused = optimize_onnx(raw, out / FP32_FILE, router.model.encoder.config)
    raw.unlink()
    if (out / "tokenizer").exists():
        shutil.rmtree(out / "tokenizer")
    shutil.copytree(Path(router_dir) / "tokenizer", out / "tokenizer")
    copy_novelty(router_dir, out, router.info)

    encoder = RequestEncoder(router.tokenizer, router.info)
    feeds = [encoder.batch([r]) for r in requests]
    torch_p = np.concatenate([_torch_probs(router, f) for f in feeds])
    fp32 = ort_session(out / FP32_FILE, threads)
    onnx_p = run_session(fp32, feeds)
    report = ExportReport(n_requests=len(requests), max_abs_diff_fp32=float(np.abs(torch_p - onnx_p).max()),
                          decisions_equal_fp32=_agreement(decide, torch_p, onnx_p), fused_ops=fused)
    if int8:
        quantize_int8(out / FP32_FILE, out / INT8_FILE)
        q = ort_session(out / INT8_FILE, threads)
        int8_p = run_session(q, feeds)
        sample = feeds[: min(len(feeds), 50)]
        timed_p50_ms(fp32, sample[:3]), timed_p50_ms(q, sample[:3])  # warm-up
        p_fp32, p_int8 = timed_p50_ms(fp32, sample), timed_p50_ms(q, sample)
        report.int8 = {"max_abs_diff": float(np.abs(int8_p - onnx_p).max()),
                       "decision_agreement": _agreement(decide, onnx_p, int8_p),
                       "p50_fp32_ms": p_fp32, "p50_int8_ms": p_int8, "speedup": p_fp32 / p_int8,
                       "timed_requests": len(sample), "min_agreement": min_int8_agreement}
        agreement = report.int8["decision_agreement"]
        if agreement is None:
            report.int8["rejected"] = "no decision rule given: INT8 agreement with fp32 cannot be checked"
        elif agreement < min_int8_agreement:
            report.int8["rejected"] = (f"INT8 changes {1 - agreement:.1%} of decisions on {len(feeds)} requests "
                                       f"(needs ≥ {min_int8_agreement:.0%} agreement with fp32)")
    servable_int8 = bool(int8 and report.int8 and "rejected" not in report.int8)
    info = dict(router.info)
    info["onnx"] = {"inputs": list(INPUTS), "output": OUTPUT, "opset": opset, "fp32": FP32_FILE,
                    "int8": INT8_FILE if servable_int8 else None, "n_meta": len(router.scaler.names),
                    "n_models": len(router.models), "exported_from": str(Path(router_dir).resolve())}
    (out / "router.json").write_text(json.dumps(info, indent=2, default=str))
    report.files = sorted(p.name for p in out.iterdir())
    report.seconds = time.perf_counter() - t0
    (out / REPORT_FILE).write_text(json.dumps(asdict(report), indent=2))
    report.check(tol)
    return report


def _torch_probs(router, feed: dict[str, np.ndarray]) -> np.ndarray:
    """PyTorch reference: the loaded Router's whole computation (heads, lexical branch, temperatures) on the same inputs."""
    import torch

    with torch.no_grad():
        z = router.net.logits(torch.from_numpy(feed["input_ids"]), torch.from_numpy(feed["attention_mask"]),
                              torch.from_numpy(feed["metadata"]))
    z = z.double().numpy() / router.temperatures
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def _agreement(decide: Decide | None, a: np.ndarray, b: np.ndarray) -> float | None:
    return None if decide is None else float(np.mean(decide(a) == decide(b)))
