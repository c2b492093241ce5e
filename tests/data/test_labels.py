"""Labels: verdicts x prices -> labels.parquet, with per-model accuracy and mean cost.

.venv/bin/python -m pytest -q tests/data/test_labels.py
"""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from data.labels import label_outputs, run_labels, summarise
from data.pool import Pool
from data.schema import (
    Call,
    Example,
    Expected,
    Message,
    Output,
    Usage,
    read_labels,
    write_examples,
    write_outputs,
)
from data.tools import tools_from_docs
from switchcraft.cli import app

POOL_YAML = """
models:
  - name: big
    recorded_as: big-recording
    prompt_style: prompt
    prices: {input_per_mtok: 10.0, output_per_mtok: 30.0}
  - name: small
    prompt_style: prompt
    prices: {input_per_mtok: 0.5, output_per_mtok: 1.5}
  - name: native
    prompt_style: native
    prices: {input_per_mtok: 1.0, output_per_mtok: 1.0}
"""


def example(i: int, no_call: bool = False) -> Example:
    tools = tools_from_docs(
        {
            "name": "f",
            "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        }
    )
    expected = Expected.nothing() if no_call else Expected.exact([Call(name="f", arguments={"x": i})])
    return Example(
        id=f"t:{i}",
        source="t",
        category="relevance" if no_call else "simple",
        messages=[Message(role="user", content="q")],
        tools=tools,
        expected=expected,
    )


def output(model: str, i: int, x: int | None, usage: Usage | None = None) -> Output:
    if x is None:
        return Output(
            example_id=f"t:{i}",
            model=model,
            raw="I can't.",
            decode_error="no_call: free text",
            usage=usage or Usage(),
        )
    return Output(
        example_id=f"t:{i}",
        model=model,
        raw=f"[f(x={x})]",
        calls=[Call(name="f", arguments={"x": x})],
        usage=usage or Usage(),
    )


@pytest.fixture()
def pool(tmp_path) -> Pool:
    from data.pool import load_pool

    p = tmp_path / "pool.yaml"
    p.write_text(POOL_YAML)
    return load_pool(p)


def test_labels_are_verdicts_times_prices(pool):
    examples = {e.id: e for e in (example(1), example(2), example(3, no_call=True))}
    outs = [
        output("big-recording", 1, 1, Usage(input_tokens=1000, output_tokens=100)),  # right
        output("big-recording", 2, 5, Usage(input_tokens=2000, output_tokens=0)),  # wrong value
        output("small", 1, 1),  # right, usage not recorded
        output("small", 3, None, Usage(input_tokens=100, output_tokens=10)),  # text on a no-call query
        output("not-in-pool", 1, 1, Usage(input_tokens=1, output_tokens=1)),
    ]
    labels = label_outputs(outs, examples, pool)
    assert [(lab.model, lab.example_id, lab.correct, lab.reason) for lab in labels] == [
        ("big", "t:1", True, "ok"),
        ("big", "t:2", False, "value_error:number"),
        ("small", "t:1", True, "ok"),
        ("small", "t:3", True, "ok"),
    ]
    assert labels[0].cost_usd == pytest.approx((1000 * 10 + 100 * 30) / 1e6)
    assert labels[1].cost_usd == pytest.approx(2000 * 10 / 1e6)
    assert labels[2].cost_usd is None  # missing usage is unknown, never zero
    assert labels[3].cost_usd == pytest.approx((100 * 0.5 + 10 * 1.5) / 1e6)
    big, small, _ = summarise(labels, pool)
    assert (big.outputs, big.correct, big.accuracy, big.costed) == (2, 1, 0.5, 2)
    assert big.mean_cost_usd == pytest.approx((0.013 + 0.02) / 2)
    assert (small.accuracy, small.costed) == (1.0, 1)
    assert small.mean_cost_usd == pytest.approx(0.000065)


def test_text_from_a_native_function_calling_model_is_no_tool_call(pool):
    examples = {e.id: e for e in (example(1), example(3, no_call=True))}
    prose = "You could call it like this:\n```python\nf(x=1)\n```"
    outs = [
        Output(example_id="t:1", model="native", raw=prose, calls=[Call(name="f", arguments={"x": 1})]),
        Output(example_id="t:1", model="small", raw=prose, calls=[Call(name="f", arguments={"x": 1})]),
        Output(
            example_id="t:3",
            model="native",
            raw=["I cannot; ", "f(x=1) is not relevant."],
            calls=[Call(name="f", arguments={"x": 1})],
        ),
        Output(
            example_id="t:1",
            model="native",
            raw=[{"f": '{"x": 1}'}],
            calls=[Call(name="f", arguments={"x": 1})],
        ),
    ]
    labels = label_outputs(outs, examples, pool)
    assert [(lab.model, lab.correct, lab.reason) for lab in labels] == [
        ("native", False, "decode_error"),  # prose with a code sample: no tool call
        ("small", True, "ok"),  # a prompt-style model answers in text by design
        ("native", True, "ok"),  # text on a no-call query is right
        ("native", True, "ok"),  # a structured call
    ]


def test_unknown_example_is_an_error(pool):
    with pytest.raises(ValueError, match="unknown example 't:9'"):
        label_outputs([output("small", 9, 1)], {}, pool)


def test_label_command_writes_parquet_summary_and_record(tmp_path, pool):
    (tmp_path / "pool.yaml").write_text(POOL_YAML)
    examples = [example(1), example(2)]
    write_examples(tmp_path / "examples.parquet", examples)
    write_outputs(
        tmp_path / "outputs.parquet",
        [output("small", 1, 1, Usage(input_tokens=10, output_tokens=2)), output("small", 2, 3)],
    )
    run = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "label",
            "--pool",
            str(tmp_path / "pool.yaml"),
            "--outputs",
            str(tmp_path / "outputs.parquet"),
            "--examples",
            str(tmp_path / "examples.parquet"),
            "--run-dir",
            str(run),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "50.00%" in res.stdout
    labels = read_labels(run / "labels.parquet")
    assert [(lab.example_id, lab.correct) for lab in labels] == [("t:1", True), ("t:2", False)]
    rows = list(csv.DictReader((run / "labels_summary.csv").open()))
    assert rows[1]["model"] == "small" and float(rows[1]["accuracy"]) == 0.5 and rows[0]["outputs"] == "0"
    assert len(rows) == 3
    meta = json.loads((run / "labels.json").read_text())
    assert meta["labels"] == 2 and meta["pool"].endswith("pool.yaml")


def test_default_pool_on_real_recordings(shared_data, tmp_path):
    run = run_labels(
        "configs/pool.yaml",
        shared_data / "bfcl_v1_pool_outputs_2024-08-11",
        shared_data / "bfcl_v1",
        tmp_path,
    )
    assert run.labels == 8 * 1630
    by = {s.model: s for s in run.summary}
    assert set(by) == {
        "gpt-4-0613",
        "claude-3-opus-20240229",
        "claude-3-5-sonnet-20240620",
        "gpt-4o-2024-08-06-FC",
        "gpt-4o-mini-2024-07-18",
        "gemini-1.5-flash-preview-0514",
        "claude-3-haiku-20240307",
        "open-mistral-nemo-2407-FC-Auto",
    }
    assert all(0.7 < s.accuracy < 0.95 for s in run.summary)
    # gpt-4-0613 ($30/$60 per Mtok) costs far more per query than gpt-4o-mini ($0.15/$0.60).
    assert by["gpt-4-0613"].mean_cost_usd > 100 * by["gpt-4o-mini-2024-07-18"].mean_cost_usd
    assert by["gemini-1.5-flash-preview-0514"].costed < 1630  # some rows recorded no tokens
