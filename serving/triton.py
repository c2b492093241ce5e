"""The Triton model repository (written from an exported router) and a local tritonserver process.

    switchcraft export runs/default/router --out runs/default/router_onnx --triton   # writes the repository

    write_model_repository("runs/default/router_onnx", "runs/default/model_repository")
    with TritonServer("runs/default/model_repository/cpu") as server:                 # 127.0.0.1, free ports
        server.http_url, server.grpc_url

Two variants of one model, `router`, with the same tensors:
- `gpu/`: the ONNX graph on Triton's `onnxruntime_onnx` backend, a GPU instance
  group (a T4), dynamic batching, CUDA by default and TensorRT as an option.
  This is what the official Triton container serves (docs/serving.md).
- `cpu/`: the same ONNX graph run by onnxruntime inside the Python backend,
  because the tritonserver bundled in the PyPI package `nvidia-pytriton` (what
  runs here and in CI) ships only the Python backend.

The bundled Python-backend stub links libpython3.11.so: the running
interpreter's lib/ goes first on LD_LIBRARY_PATH, else a pyenv Python's stub
picks up the system libpython and fails (`_recursion_count`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from training.export import copy_novelty

REPOSITORY_TEMPLATE = Path(__file__).parent / "model_repository"
MODEL_NAME = "router"
VARIANTS = ("gpu", "cpu")


# --- the repository ---------------------------------------------------------------------------------
def model_config(variant: str, *, n_models: int, n_meta: int, max_batch_size: int = 32,
                 queue_delay_us: int = 500, pad_id: int = 0, threads: int = 0) -> str:
    """config.pbtxt of the `router` model for one variant."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
    # The Python backend pads grouped requests itself, so it may take ragged lengths; the ONNX
    # backend batches only equal shapes (clients pad lengths to a multiple to make them meet).
    ragged = "\n    allow_ragged_batch: true" if variant == "cpu" else ""
    head = (
        f'# The switchcraft router ({variant} variant), written by: switchcraft export RUN/router --out DIR --triton\n'
        f'name: "{MODEL_NAME}"\n'
    )
    if variant == "gpu":
        head += 'platform: "onnxruntime_onnx"\ndefault_model_filename: "model.onnx"\n'
    else:
        head += 'backend: "python"\n'
    body = f"""max_batch_size: {max_batch_size}
input [
  {{
    name: "input_ids"
    data_type: TYPE_INT64
    dims: [ -1 ]{ragged}
  }},
  {{
    name: "attention_mask"
    data_type: TYPE_INT64
    dims: [ -1 ]{ragged}
  }},
  {{
    name: "metadata"
    data_type: TYPE_FP32
    dims: [ {n_meta} ]
  }}
]
output [
  {{
    name: "probabilities"
    data_type: TYPE_FP32
    dims: [ {n_models} ]
  }}
]
"""
    if variant == "gpu":
        body += f"""dynamic_batching {{
  max_queue_delay_microseconds: {queue_delay_us}
}}
"""
        body += """instance_group [
  {
    count: 1
    kind: KIND_GPU
    gpus: [ 0 ]
  }
]
# CUDA is the onnxruntime backend's default on GPU. To let TensorRT build FP16 engines instead
# (slower first requests while engines build, then faster on a T4), uncomment:
# optimization {
#   execution_accelerators {
#     gpu_execution_accelerator: [
#       {
#         name: "tensorrt"
#         parameters { key: "precision_mode" value: "FP16" }
#         parameters { key: "max_workspace_size_bytes" value: "1073741824" }
#       }
#     ]
#   }
# }
"""
    else:
        # No dynamic batching on CPU, by measurement (docs/serving.md): the Python backend pads a ragged batch to
        # its longest request, and on these 2 cores padding costs more than batching saves. MiniLM router, 128
        # BFCL requests, gRPC callers each routing alone (load ~3): with dynamic batching (500 us) 28 / 32 / 18
        # req/s at 1 / 8 / 32 callers, without 32 / 37 / 32; two 1-thread instances 25 / 42 / 19 (better at 8,
        # collapsing at 32 with the batches). The gateway already sends its own batches grouped by length.
        body += f"""instance_group [
  {{
    count: 1
    kind: KIND_CPU
  }}
]
parameters: {{
  key: "intra_op_threads"
  value: {{ string_value: "{threads}" }}
}}
parameters: {{
  key: "pad_id"
  value: {{ string_value: "{pad_id}" }}
}}
"""
    return head + body


def write_model_repository(onnx_dir: str | Path, out: str | Path, *, int8: bool = False, max_batch_size: int = 32,
                           queue_delay_us: int = 500, threads: int = 0) -> Path:
    """`out/{gpu,cpu}/router/{config.pbtxt,1/model.onnx}` (+ the CPU model.py) and `out/router.json`."""
    onnx_dir, out = Path(onnx_dir), Path(out)
    info = json.loads((onnx_dir / "router.json").read_text())
    if "onnx" not in info:
        raise ValueError(f"{onnx_dir}: router.json has no 'onnx' section; export first: switchcraft export ROUTER --out DIR")
    graph = onnx_dir / (info["onnx"]["int8"] if int8 else info["onnx"]["fp32"])
    if not graph.exists():
        raise FileNotFoundError(f"{graph}: missing; export with --int8 to serve the INT8 graph")
    from transformers import AutoTokenizer

    pad_id = AutoTokenizer.from_pretrained(onnx_dir / "tokenizer", local_files_only=True).pad_token_id or 0
    dims = {"n_models": info["onnx"]["n_models"], "n_meta": info["onnx"]["n_meta"],
            "max_batch_size": max_batch_size, "queue_delay_us": queue_delay_us}
    for variant in VARIANTS:
        model_dir = out / variant / MODEL_NAME
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        extra = {"pad_id": pad_id, "threads": threads} if variant == "cpu" else {}
        (model_dir / "config.pbtxt").write_text(model_config(variant, **dims, **extra))
        _link_or_copy(graph, model_dir / "1" / "model.onnx")
        if variant == "cpu":
            shutil.copy(REPOSITORY_TEMPLATE / "cpu" / MODEL_NAME / "1" / "model.py", model_dir / "1" / "model.py")
    # The client packs requests and applies the policy with this file (same tokenizer beside it).
    shutil.copy(onnx_dir / "router.json", out / "router.json")
    copy_novelty(onnx_dir, out, info)
    if (out / "tokenizer").exists():
        shutil.rmtree(out / "tokenizer")
    shutil.copytree(onnx_dir / "tokenizer", out / "tokenizer")
    return out


def _link_or_copy(src: Path, dst: Path) -> None:
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)  # 90 MB twice is a waste when a hard link will do
    except OSError:
        shutil.copy(src, dst)


# --- the server -------------------------------------------------------------------------------------
def bundled_tritonserver() -> Path:
    """The tritonserver directory shipped inside the nvidia-pytriton wheel."""
    import importlib.util

    # Found, not imported: importing pytriton needs its own dependencies (installed --no-deps here).
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "tritonserver is bundled by the PyPI package nvidia-pytriton: pip install --no-deps nvidia-pytriton==0.7.0"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    if not (root / "bin" / "tritonserver").exists():
        raise FileNotFoundError(f"{root}/bin/tritonserver missing: reinstall nvidia-pytriton")
    return root


STUB_ENV_VAR = "SWITCHCRAFT_TRITON_STUB_ENV"
STUB_NUMPY = "numpy==1.26.4"


def stub_env_dir() -> Path:
    return Path(os.environ.get(STUB_ENV_VAR) or Path(sys.prefix) / "triton-stub-env")


def prepare_stub_env(where: Path | None = None) -> Path:
    """A tiny virtual environment for the Python-backend stub: NumPy 1.x, then this environment's packages.

    The bundled stub was built with a pybind11 that reads NumPy 1.x array layouts: with NumPy 2
    its output tensors come back empty. It finds its Python through PATH (PYTHONPATH is ignored),
    so it gets an environment of its own whose site-packages hold NumPy 1.x and a .pth line
    pointing at this environment's site-packages (for onnxruntime).
    """
    import venv

    where = where or stub_env_dir()
    if not (where / "pyvenv.cfg").exists():
        venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    site = where / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    if not (site / "numpy").is_dir():
        raise FileNotFoundError(
            f"{where}: no NumPy 1.x for the Triton Python-backend stub; install it with: "
            f"{sys.executable} -m pip install --no-deps --target {site} '{STUB_NUMPY}'  (or set {STUB_ENV_VAR})"
        )
    ours = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    (site / "zz_switchcraft_parent.pth").write_text("\n".join(ours) + "\n")
    return where


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TritonServer:
    """A tritonserver process on loopback serving `repository`; ready when `start()` returns."""

    def __init__(self, repository: str | Path, *, http_port: int | None = None, grpc_port: int | None = None,
                 startup_timeout_s: float = 90.0, log_verbose: int = 0) -> None:
        self.repository = Path(repository).resolve()
        if not (self.repository / MODEL_NAME / "config.pbtxt").exists():
            raise FileNotFoundError(f"{self.repository}: no {MODEL_NAME}/config.pbtxt; write it with write_model_repository")
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self.log_verbose = log_verbose
        self.process: subprocess.Popen | None = None
        self._workdir: tempfile.TemporaryDirectory | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def _backends(self, work: Path) -> Path:
        """A backend directory with the Python-backend stub of this interpreter's version."""
        dist = bundled_tritonserver()
        backends = work / "backends"
        shutil.copytree(dist / "backends", backends)
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.exists():
            raise FileNotFoundError(f"nvidia-pytriton has no Python-backend stub for Python {version}")
        shutil.copy(stub, backends / "python" / "triton_python_backend_stub")
        return backends

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        dist = bundled_tritonserver()
        libs = [sysconfig.get_config_var("LIBDIR"), str(dist.parent.parent / "nvidia_pytriton.libs")]
        env["LD_LIBRARY_PATH"] = ":".join([p for p in libs if p] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
        # The stub embeds Python and takes its environment from the first python on PATH.
        env["PATH"] = f"{prepare_stub_env() / 'bin'}:{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def start(self) -> TritonServer:
        self._workdir = tempfile.TemporaryDirectory(prefix="switchcraft-triton-")
        work = Path(self._workdir.name)
        cmd = [
            str(bundled_tritonserver() / "bin" / "tritonserver"),
            f"--model-repository={self.repository}",
            f"--backend-directory={self._backends(work)}",
            "--http-address=127.0.0.1", f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
            "--allow-metrics=false", "--allow-gpu-metrics=false", "--exit-timeout-secs=5",
            f"--log-verbose={self.log_verbose}",
        ]
        self.log_path = work / "tritonserver.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.environment(),
                                        cwd=work, start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://{self.http_url}/v2/models/{MODEL_NAME}/ready"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"tritonserver exited with {self.process.returncode}:\n{tail}")
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise TimeoutError(f"tritonserver not ready after {self.startup_timeout_s:.0f} s:\n{tail}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except (OSError, AttributeError):
            return "(no log)"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> TritonServer:  # noqa: PYI034 - start() returns self
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
