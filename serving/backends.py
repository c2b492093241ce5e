"""Where the router graph runs: in-process ONNX Runtime, or a Triton server over HTTP or gRPC.

    backend = make_backend("ort", path="runs/default/router_onnx/router.onnx", threads=2)
    backend = make_backend("triton-grpc", url="127.0.0.1:8001", timeout_s=1.0)
    probs = backend.infer({"input_ids": ..., "attention_mask": ..., "metadata": ...})   # [batch, n_models]

Every backend takes the same padded batch and returns `probabilities`. Errors
become `BackendError` (or `BackendTimeout`), naming the backend and what to check.
Triton clients are kept one per thread and reused: tritonclient's HTTP client is
not thread-safe, and a fresh connection per request would cost more than the model.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import numpy as np

OUTPUT = "probabilities"
MODEL_NAME = "router"
DTYPES = {"input_ids": "INT64", "attention_mask": "INT64", "metadata": "FP32"}


class BackendError(RuntimeError):
    """The router graph could not be run (server down, bad reply, …)."""


class BackendTimeout(BackendError):
    """The backend did not answer within the timeout."""


class Backend(Protocol):
    name: str

    def infer(self, feed: dict[str, np.ndarray]) -> np.ndarray: ...

    def ready(self) -> bool: ...

    def close(self) -> None: ...


def pick_providers(prefer_gpu: bool = True) -> list[str]:
    """CUDA when onnxruntime-gpu is installed and sees a device, else CPU (decided at run time)."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"] if prefer_gpu else ["CPUExecutionProvider"]
    return [p for p in wanted if p in available]


class OrtBackend:
    """The ONNX graph in this process."""

    name = "ort"

    def __init__(self, path: str | Path, *, threads: int | None = None, providers: list[str] | None = None,
                 optimize: bool = True, spin: bool = False) -> None:
        import onnxruntime as ort

        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no ONNX graph; export one: switchcraft export ROUTER_DIR --out DIR")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        if threads:
            opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1  # one graph, run sequentially: extra pools only add wake-ups
        # ORT's workers busy-wait after each run by default. On a small shared CPU that burns the cores
        # the tokenizer, the event loop and other sessions need; off unless asked (spin=True).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        opts.log_severity_level = 3
        self.providers = providers or pick_providers()
        self.session = ort.InferenceSession(str(path), opts, providers=self.providers)
        self.path = path

    def infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        try:
            return self.session.run([OUTPUT], feed)[0]
        except Exception as e:  # onnxruntime raises its own exception types for bad shapes
            raise BackendError(f"onnxruntime ({self.path.name}): {e}") from e

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self.session = None


class _TritonBackend:
    """Shared parts of the HTTP and gRPC clients: one client per thread, timeouts, error mapping."""

    protocol = ""

    def __init__(self, url: str, *, model: str = MODEL_NAME, timeout_s: float = 2.0) -> None:
        if "://" in url:
            raise ValueError(f"Triton url is host:port without a scheme, not {url!r}")
        self.url, self.model, self.timeout_s = url, model, timeout_s
        self.name = f"triton-{self.protocol}"
        self._local = threading.local()
        self._clients: list = []
        self._lock = threading.Lock()

    def _client(self):
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._new_client()
            with self._lock:
                self._clients.append(client)
        return client

    def _inputs(self, module, feed: dict[str, np.ndarray]) -> list:
        inputs = []
        for name, array in feed.items():
            x = module.InferInput(name, list(array.shape), DTYPES[name])
            x.set_data_from_numpy(np.ascontiguousarray(array))
            inputs.append(x)
        return inputs

    def ready(self) -> bool:
        try:
            return bool(self._client().is_model_ready(self.model))
        except Exception:  # noqa: BLE001 - any failure means "not ready"; /readyz says so
            return False

    def close(self) -> None:
        with self._lock:
            for c in self._clients:
                try:
                    c.close()
                except Exception:  # noqa: BLE001, S110 - closing a broken connection must not raise
                    pass
            self._clients.clear()
        self._local = threading.local()

    def _fail(self, e: Exception) -> BackendError:
        text = str(e)
        if "timed out" in text.lower() or "deadline" in text.lower() or isinstance(e, TimeoutError):
            return BackendTimeout(f"{self.name} {self.url}: no answer within {self.timeout_s:g} s")
        return BackendError(f"{self.name} {self.url} model {self.model!r}: {text or type(e).__name__}")


class TritonHttpBackend(_TritonBackend):
    protocol = "http"

    def _new_client(self):
        import tritonclient.http as th

        return th.InferenceServerClient(self.url, connection_timeout=self.timeout_s, network_timeout=self.timeout_s)

    def infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        import tritonclient.http as th

        try:
            result = self._client().infer(self.model, self._inputs(th, feed),
                                          outputs=[th.InferRequestedOutput(OUTPUT, binary_data=True)])
        except Exception as e:
            self._local.client = None  # a broken connection is not reused
            raise self._fail(e) from e
        return result.as_numpy(OUTPUT)


class TritonGrpcBackend(_TritonBackend):
    protocol = "grpc"

    def _new_client(self):
        import tritonclient.grpc as tg

        return tg.InferenceServerClient(self.url)

    def infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        import tritonclient.grpc as tg

        try:
            result = self._client().infer(self.model, self._inputs(tg, feed),
                                          outputs=[tg.InferRequestedOutput(OUTPUT)], client_timeout=self.timeout_s)
        except Exception as e:
            raise self._fail(e) from e
        return result.as_numpy(OUTPUT)


BACKENDS = ("ort", "triton-http", "triton-grpc")


def make_backend(kind: str, *, path: str | Path | None = None, url: str | None = None, timeout_s: float = 2.0,
                 threads: int | None = None, model: str = MODEL_NAME, spin: bool = False) -> Backend:
    if kind == "ort":
        if path is None:
            raise ValueError("the ort backend needs the ONNX file (path=...)")
        return OrtBackend(path, threads=threads, spin=spin)
    if kind in ("triton-http", "triton-grpc"):
        if not url:
            raise ValueError(f"the {kind} backend needs url=host:port")
        cls = TritonHttpBackend if kind == "triton-http" else TritonGrpcBackend
        return cls(url, model=model, timeout_s=timeout_s)
    raise ValueError(f"unknown backend {kind!r}; known: {', '.join(BACKENDS)}")
