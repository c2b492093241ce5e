"""Triton Python-backend model: the exported router ONNX graph run by onnxruntime on CPU.

    tritonserver --model-repository serving/model_repository/cpu     (via serving.triton.TritonServer)

The CPU variant of the repository: pytriton's bundled tritonserver has no
onnxruntime backend, so this model runs the very same `model.onnx` (beside this
file) with onnxruntime in the Python backend. Inputs and outputs are the GPU
variant's (`input_ids`, `attention_mask`, `metadata` → `probabilities`), so a
client cannot tell them apart. Requests the dynamic batcher groups (lengths may
differ: the inputs allow ragged batches) are padded to the longest and run as
one ONNX Runtime call.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        here = os.path.join(args["model_repository"], args["model_version"])
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        threads = int(params.get("intra_op_threads", "0"))
        if threads:
            opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # Busy-waiting workers would take the CPU from the gateway sharing this machine.
        opts.add_session_config_entry("session.intra_op.allow_spinning", params.get("allow_spinning", "0"))
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(os.path.join(here, params.get("onnx_file", "model.onnx")), opts,
                                            providers=["CPUExecutionProvider"])
        self.pad_id = int(params.get("pad_id", "0"))

    def execute(self, requests):
        ids, masks, metas = [], [], []
        for request in requests:
            ids.append(pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy())
            masks.append(pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy())
            metas.append(pb_utils.get_input_tensor_by_name(request, "metadata").as_numpy())
        rows = [len(x) for x in ids]
        width = max(x.shape[1] for x in ids)
        input_ids = np.full((sum(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((sum(rows), width), dtype=np.int64)
        start = 0
        for x, m in zip(ids, masks):
            input_ids[start : start + len(x), : x.shape[1]] = x
            mask[start : start + len(x), : m.shape[1]] = m
            start += len(x)
        feed = {"input_ids": input_ids, "attention_mask": mask,
                "metadata": np.concatenate(metas).astype(np.float32)}
        probs = self.session.run(["probabilities"], feed)[0]
        out, start = [], 0
        for n in rows:
            # The stub's pybind11 reads NumPy 1.x array descriptors: it must run with NumPy 1.x
            # (serving.triton puts one first on its path); with NumPy 2 outputs come back empty.
            tensor = pb_utils.Tensor("probabilities", np.ascontiguousarray(probs[start : start + n], dtype=np.float32))
            out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            start += n
        return out

    def finalize(self):
        self.session = None
