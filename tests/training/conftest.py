"""Tiny throwaway inputs for the training tests: a word-level WordPiece tokenizer, a 2-layer BERT, a toy task.

Nothing here touches a cache or the network; the whole folder runs in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from data.schema import Example, Expected, Label, Message, Tool, write_examples, write_labels

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PUNCT = list(";()[]:,?=-|.\"'…_")
WORDS = ["weather", "forecast", "city", "today", "stock", "price", "company", "shares", "get", "book", "flight", "hotel", "search", "hard", "easy", "what", "is", "the", "in", "of", "for", "a", "an", "to", "and", "user", "assistant", "system", "tool", "call", "str", "int", "float", "bool", "list", "dict", "any"]
NUMBERED = [f"w{i}" for i in range(600)]  # distinct one-token words, so tests can see which were kept


def make_tokenizer():
    from transformers import BertTokenizer

    vocab = {w: i for i, w in enumerate(dict.fromkeys(SPECIALS + PUNCT + WORDS + NUMBERED))}
    return BertTokenizer(vocab=vocab, do_lower_case=True)


@pytest.fixture(scope="session")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory):
    """A folder holding a random 2-layer, 32-wide BERT and its tokenizer (a local 'pretrained' backbone)."""
    import torch
    from transformers import BertConfig, BertModel

    tok = make_tokenizer()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=512)
    out = tmp_path_factory.mktemp("tiny_bert")
    BertModel(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tool(name: str, description: str = "", required=("x",), optional=()) -> Tool:
    props = {p: {"type": "string"} for p in (*required, *optional)}
    return Tool(name=name, description=description,
                parameters={"type": "object", "properties": props, "required": list(required)})


POOL_YAML = """# toy pool for tests
models:
  - name: small
    prices: {input_per_mtok: 0.1, output_per_mtok: 0.2}
  - name: big
    prices: {input_per_mtok: 10, output_per_mtok: 20}
  - name: extra
    prices: {input_per_mtok: 1, output_per_mtok: 2}
"""


@pytest.fixture()
def toy_task(tmp_path):
    """48 requests whose labels depend on what the router can see.

    small is right iff the request offers one tool; big is right unless the question says "hard";
    extra (for --add-model) is right iff the request offers two or more tools.
    """
    rng = np.random.default_rng(0)
    examples, labels = [], []
    for i in range(48):
        n_tools = 1 + i % 3
        hard = i % 4 == 0
        words = " ".join(rng.choice(NUMBERED[:50], 5))
        q = f"{'hard' if hard else 'easy'} what is the weather in {words} q{i}"
        tools = [tool(f"get_weather_{k}", "weather forecast for a city") for k in range(n_tools)]
        ex = Example(id=f"toy:{i}", source="toy", category="c", messages=[Message(role="user", content=q)],
                     tools=tools, expected=Expected.nothing())
        examples.append(ex)
        for model, ok, cost in (("small", n_tools == 1, 1e-5), ("big", not hard, 1e-3), ("extra", n_tools >= 2, 1e-4)):
            labels.append(Label(example_id=ex.id, model=model, correct=ok, reason="ok" if ok else "wrong",
                                cost_usd=cost * (1 + i % 2)))
    write_examples(tmp_path / "examples.parquet", examples)
    write_labels(tmp_path / "labels.parquet", labels)
    (tmp_path / "pool.yaml").write_text(POOL_YAML)
    return tmp_path


def toy_overrides(root, backbone) -> list[str]:
    """Overrides that point train.yaml at the toy task and the tiny backbone, small and fast."""
    return [
        f"run_dir={root}/run", f"labels={root}/labels.parquet", f"examples={root}/examples.parquet",
        f"pool={root}/pool.yaml", "models=[small, big]", f"backbone.name={backbone}", "folds=3",
        "frozen.epochs=25", "frozen.batch_size=8", "frozen.head_lr=0.01", "frozen.patience=25", "head_hidden=16",
        "finetune.epochs=1", "finetune.batch_size=8", "finetune.max_steps_per_epoch=2",
        "packing.max_tokens=64", "progress=false", "num_threads=1",
    ]
