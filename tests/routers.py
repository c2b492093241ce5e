"""A tiny router built with the training stage's real code, for the tests that need one to serve or export.

The router is a random 2-layer BERT inside the real RouterModel, with MiniLM's real WordPiece tokenizer and the
real pool, saved by training.router.save_router: packing and metadata are exactly what production does, and it
builds in seconds. tests/conftest.py builds it (and its ONNX export) once per test session.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from serving.policy import choose_batch

REPO = Path(__file__).resolve().parents[1]
N_REQUESTS = 16


def bfcl_sample(shared_data: Path, n: int = N_REQUESTS) -> list:
    """Every category, then an even spread: long multi-function requests and one-liners alike."""
    from data.sources import read_source

    examples = read_source("bfcl_v1", str(shared_data / "bfcl_v1"))
    by_cat: dict[str, list] = {}
    for ex in examples:
        by_cat.setdefault(ex.category, []).append(ex)
    picked = [v[0] for v in by_cat.values()]
    picked += examples[:: max(1, len(examples) // (n - len(picked)))][: n - len(picked)]
    return picked[:n]


def build_tiny_router(out: Path, examples: list) -> Path:
    """A saved router folder (training.router.save_router) with a random tiny encoder and the real pool."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from data.pool import load_pool
    from training.config import PackingSettings
    from training.metadata import FEATURE_NAMES, MetadataScaler, metadata_row, request_metadata
    from training.model import RouterModel, minilm_path
    from training.router import save_router

    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=64, max_position_embeddings=512))
    pool = load_pool(REPO / "configs" / "pool.yaml")
    models = pool.names
    model = RouterModel(encoder, len(FEATURE_NAMES), len(models), head_hidden=16, dropout=0.0)
    with torch.no_grad():  # spread the random head so probabilities straddle the threshold
        model.heads[0].net[-1].weight.mul_(8.0)
    rows = np.array([metadata_row(request_metadata(e.messages, e.tools, tokenizer)) for e in examples])
    costs = [pool.get(m).prices.input_per_mtok * 300e-6 for m in models]
    save_router(out, model, tokenizer, {
        "models": models, "prices": {m: pool.get(m).prices.model_dump() for m in models},
        "cost_profile": dict(zip(models, costs)), "threshold": 0.5,
        "temperatures": {m: (1.7 if i == 2 else 1.0) for i, m in enumerate(models)},  # the graph must apply it
        "packing": PackingSettings(max_tokens=256).model_dump(), "metadata": MetadataScaler.fit(rows).to_json(),
        "backbone": {"name": "tiny-bert", "pooling": "mean"},
    })
    return out


def decide_with(info: dict):
    costs = np.array([info["cost_profile"][m] for m in info["models"]])
    return lambda p: choose_batch(p, costs, info["threshold"])


def training_blend(router_dir, requests, wc: float | None = None) -> np.ndarray:
    """The recipe's held-out computation: head ⊕ lexical blend, then the category branch on the same TF-IDF and
    scaled metadata, in numpy (at weight `wc`; default: the router's own)."""
    import torch

    from training.export import RequestEncoder
    from training.router import load_router

    router = load_router(router_dir)
    feed = RequestEncoder(router.tokenizer, router.info).batch(requests)
    with torch.no_grad():
        head = router.model(torch.from_numpy(feed["metadata"]), input_ids=torch.from_numpy(feed["input_ids"]),
                            attention_mask=torch.from_numpy(feed["attention_mask"])).double().numpy()
    ids = [router.pack_request(m, t).ids for m, t in requests]
    z = router.lexical.blend(head, ids)
    k, wc = router.category.n_models, router.category.weight if wc is None else wc
    z[:, :k] = (1 - wc) * z[:, :k] + wc * router.category.logits(router.lexical.features(ids), feed["metadata"])
    return 1.0 / (1.0 + np.exp(-z / router.temperatures))


# A coding agent's first turn: a long system prompt about a CLI, an environment block, file and shell tools.
AGENT_SYSTEM = (
    "You are an interactive CLI tool that helps users with software engineering tasks. Use the instructions below "
    "and the tools available to you to assist the user. IMPORTANT: Assist with defensive security tasks only.\n"
    "# Tone and style\nYou should be concise, direct, and to the point. When you run a non-trivial bash command, "
    "you should explain what the command does and why you are running it.\n# Following conventions\nWhen making "
    "changes to files, first understand the file's code conventions. Mimic code style, use existing libraries.\n"
    "<env>\nWorking directory: /home/dev/project\nIs directory a git repo: Yes\nPlatform: linux\n</env>\n") * 4
AGENT_TOOLS = [
    ("Read", "Reads a file from the local filesystem. The file_path parameter must be an absolute path."),
    ("Bash", "Executes a given bash command in a persistent shell session with optional timeout."),
    ("Edit", "Performs exact string replacements in files. You must use your Read tool at least once first."),
    ("Write", "Writes a file to the local filesystem, overwriting the existing file if there is one."),
    ("Glob", "Fast file pattern matching tool that works with any codebase size; returns matching paths."),
    ("Grep", "A powerful search tool built on ripgrep; supports full regex syntax and file type filters."),
    ("TodoWrite", "Use this tool to create and manage a structured task list for your current coding session."),
    ("WebFetch", "Fetches content from a specified URL and processes it using an AI model."),
]


def agent_request() -> tuple[list, list]:
    """(messages, tools) of a coding agent's first turn: nothing like a benchmark question."""
    from data.schema import Message, Tool

    tools = [Tool(name=n, description=d, parameters={"type": "object", "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file"},
        "command": {"type": "string", "description": "The command to execute"}}, "required": ["file_path"]})
        for n, d in AGENT_TOOLS]
    return [Message(role="system", content=AGENT_SYSTEM),
            Message(role="user", content="read notes.txt in this folder and tell me what it says")], tools


def with_novelty(router_dir: Path, novelty, out: Path) -> Path:
    """A copy of an exported router folder with a fitted novelty index beside its router.json, as training writes
    it (training/novelty.py)."""
    import json
    import shutil

    shutil.copytree(router_dir, out)
    info = json.loads((out / "router.json").read_text())
    info["novelty"] = novelty.info()
    (out / "router.json").write_text(json.dumps(info))
    novelty.save(out)
    return out
