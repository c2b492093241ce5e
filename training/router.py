"""The saved router: a self-contained folder, and the object serving loads from it.

    from training.router import load_router
    router = load_router("runs/default/router")
    router.predict(examples)                          # [n, n_models] P(correct), pool order = router.models
    router.predict(messages=[...], tools=[...])       # [n_models] for one request

Folder layout: `encoder/` (Hugging Face weights + config), `tokenizer/`,
`heads.safetensors`, `lexical.safetensors` (the lexical branch, when trained
with one), `category.safetensors` (the category branch, likewise), `router.json` (pool order, prices, cost profile, threshold,
temperatures, packing settings, metadata scaling, the lexical branch's
settings, versions, the training config). Loading never touches the network.

`Router.net` is the whole computation as one torch module — encoder, heads,
the lexical and category branches blended in, temperatures, sigmoid — and is what the ONNX
export traces, so PyTorch and the exported graph cannot drift apart.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.config import PackingSettings
from training.dataset import BucketBatches, pad_batch
from training.category import CATEGORY_FILE, CategoryModel
from training.lexical import LEXICAL_FILE, LexicalModel
from training.metadata import MetadataScaler, metadata_row, request_metadata
from training.model import RouterModel
from training.packing import PackedRequest, pack_request

ROUTER_JSON = "router.json"
HEADS_FILE = "heads.safetensors"
FORMAT = 1


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import accelerate
    import tokenizers
    import transformers

    try:
        own = version("switchcraft")
    except PackageNotFoundError:
        own = "unknown"
    return {
        "switchcraft": own, "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
        "accelerate": accelerate.__version__, "numpy": np.__version__,
    }


def save_router(out_dir: str | Path, model: RouterModel, tokenizer, info: dict[str, Any],
                lexical: LexicalModel | None = None, category: CategoryModel | None = None) -> Path:
    """Write the folder; `info` becomes router.json (head layout, lexical settings and versions are added here)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.encoder.save_pretrained(out / "encoder")
    tokenizer.save_pretrained(out / "tokenizer")
    heads = {k: v.detach().cpu().contiguous() for k, v in model.heads.state_dict().items()}
    save_file(heads, out / HEADS_FILE)
    info = dict(info)
    info.pop("lexical", None)
    if lexical is not None:
        if lexical.n_models > len(info["models"]):
            raise ValueError(f"the lexical branch has {lexical.n_models} logits but router.json lists {len(info['models'])} models")
        lexical.save(out)
        info["lexical"] = lexical.settings()
    elif (out / LEXICAL_FILE).exists():
        (out / LEXICAL_FILE).unlink()  # a stale branch from an earlier router in this folder must not load
    info.pop("category", None)
    if category is not None:
        if lexical is None:
            raise ValueError("the category branch reads the lexical branch's TF-IDF: save both")
        category.save(out)
        info["category"] = category.settings()
    elif (out / CATEGORY_FILE).exists():
        (out / CATEGORY_FILE).unlink()
    info.update(
        format=FORMAT,
        head={"sizes": model.head_sizes, "hidden": model.head_hidden, "dropout": model.dropout,
              "pooling": model.pooling, "n_meta": model.n_meta, "sep_token_id": model.sep_token_id},
        versions=versions(),
        saved=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    if sum(model.head_sizes) != len(info["models"]):
        raise ValueError(f"heads give {sum(model.head_sizes)} logits but router.json lists {len(info['models'])} models")
    (out / ROUTER_JSON).write_text(json.dumps(info, indent=2, default=str))
    return out


class RouterNet(torch.nn.Module):
    """(input_ids, attention_mask, metadata) → probabilities: what `Router` predicts and the ONNX graph computes."""

    def __init__(self, model: RouterModel, lexical: LexicalModel | None, temperatures: np.ndarray,
                 category: CategoryModel | None = None) -> None:
        super().__init__()
        if category is not None and lexical is None:
            raise ValueError("the category branch reads the lexical branch's TF-IDF: a router with one needs both")
        self.model = model.eval()
        self.lexical = lexical.torch_branch() if lexical is not None else None
        self.category = category.torch_branch() if category is not None else None
        self.register_buffer("temperatures", torch.tensor(temperatures, dtype=torch.float32))

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, metadata: torch.Tensor) -> torch.Tensor:
        """Before temperature: the head's logits, the first models' blended with the lexical branch, then with
        the category branch."""
        z = self.model(metadata, input_ids=input_ids, attention_mask=attention_mask)
        if self.lexical is None:
            return z
        k, w = self.lexical.coef.shape[1], self.lexical.weight
        x = self.lexical.features(input_ids, attention_mask)
        blended = (1.0 - w) * z[:, :k] + w * (x @ self.lexical.coef + self.lexical.intercept)
        if self.category is not None:
            wc = self.category.weight
            blended = (1.0 - wc) * blended + wc * self.category(x, metadata)
        return torch.cat([blended, z[:, k:]], dim=1)  # models added later (--add-model) keep their head's logit

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, metadata: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(input_ids, attention_mask, metadata) / self.temperatures)


class Router:
    """Predicts P(correct) per pool model for tool-calling requests."""

    def __init__(self, model: RouterModel, tokenizer, info: dict[str, Any], lexical: LexicalModel | None = None,
                 category: CategoryModel | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.info = info
        self.lexical = lexical
        self.category = category
        self.models: list[str] = list(info["models"])
        self.packing = PackingSettings.model_validate(info["packing"])
        self.scaler = MetadataScaler.from_json(info["metadata"])
        self.threshold: float = float(info.get("threshold", 0.5))
        temps = info.get("temperatures") or {}
        self.temperatures = np.array([float(temps.get(m, 1.0)) for m in self.models])
        self.net = RouterNet(self.model, lexical, self.temperatures, category).to(next(model.parameters()).device).eval()

    @property
    def prices(self) -> dict[str, dict]:
        return self.info.get("prices", {})

    @property
    def cost_profile(self) -> dict[str, float | None]:
        return self.info.get("cost_profile", {})

    def pack_request(self, messages: list[Any], tools: list[Any] | None) -> PackedRequest:
        """Exactly the packing the router was trained with."""
        return pack_request(messages, tools, self.tokenizer, self.packing)

    def metadata(self, messages: list[Any], tools: list[Any] | None) -> np.ndarray:
        raw = metadata_row(request_metadata(messages, tools, self.tokenizer))
        return self.scaler.transform(np.array([raw]))[0]

    @torch.no_grad()
    def logits(self, requests: list[tuple[list[Any], list[Any] | None]], batch_size: int = 16) -> np.ndarray:
        """Temperature-scaled logits, [n, n_models]."""
        ids = [self.pack_request(m, t).ids for m, t in requests]
        meta = np.stack([self.metadata(m, t) for m, t in requests]) if requests else np.zeros((0, len(self.scaler.names)))
        out = np.zeros((len(requests), len(self.models)), dtype=np.float64)
        pad = self.tokenizer.pad_token_id or 0
        device = next(self.model.parameters()).device
        for rows in BucketBatches(np.array([len(x) for x in ids]), batch_size, shuffle=False):
            x, att = pad_batch([ids[i] for i in rows], pad)
            z = self.net.logits(x.to(device), att.to(device), torch.from_numpy(meta[rows]).to(device))
            out[rows] = z.double().cpu().numpy()
        return out / self.temperatures

    def predict(self, examples: list[Any] | None = None, *, messages: list[Any] | None = None,
                tools: list[Any] | None = None, batch_size: int = 16) -> np.ndarray:
        """P(correct) in `self.models` order: [n, n_models] for examples, [n_models] for one messages+tools."""
        if (examples is None) == (messages is None):
            raise ValueError("give either examples, or messages (and tools) of one request")
        if examples is not None:
            z = self.logits([(e.messages, e.tools) for e in examples], batch_size)
            return 1.0 / (1.0 + np.exp(-z))
        z = self.logits([(messages, tools)], batch_size)
        return 1.0 / (1.0 + np.exp(-z[0]))


def load_router(path: str | Path, device: str | None = None) -> Router:
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = Path(path)
    if not (path / ROUTER_JSON).exists():
        raise FileNotFoundError(f"{path}: no {ROUTER_JSON}; train one with: switchcraft train --config configs/train.yaml")
    info = json.loads((path / ROUTER_JSON).read_text())
    if info.get("format") != FORMAT:
        raise ValueError(f"{path / ROUTER_JSON}: format {info.get('format')!r}, this code reads {FORMAT}; retrain")
    encoder = AutoModel.from_pretrained(path / "encoder", local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer", local_files_only=True)
    head = info["head"]
    model = RouterModel(encoder, head["n_meta"], head["sizes"][0], pooling=head["pooling"],
                        head_hidden=head["hidden"], dropout=head["dropout"], sep_token_id=head.get("sep_token_id"))
    for n in head["sizes"][1:]:
        model.add_head(n)
    model.heads.load_state_dict(load_file(path / HEADS_FILE))
    lexical = LexicalModel.load(path, info["lexical"]) if info.get("lexical") else None
    category = CategoryModel.load(path, info["category"]) if info.get("category") else None
    return Router(model.to(device or "cpu"), tokenizer, info, lexical, category)
