import pytest
from pydantic import ValidationError

from data.schema import (
    Call,
    Example,
    Expected,
    ExpectedArg,
    ExpectedCall,
    Label,
    Message,
    Output,
    Tool,
    Usage,
    read_examples,
    read_labels,
    read_outputs,
    write_examples,
    write_labels,
    write_outputs,
)


def _example(**kw):
    base = dict(
        id="t:1",
        source="t",
        category="simple",
        messages=[Message(role="user", content="hi")],
        tools=[Tool(name="f", parameters={"type": "object", "properties": {"a": {"type": "integer"}}})],
        expected=Expected(alternatives=[[ExpectedCall(name="f", args={"a": ExpectedArg(values=[1, 1.0]), "b": ExpectedArg(optional=True)})]]),
        meta={"nested": {"x": [1, "two", None]}},
    )
    base.update(kw)
    return Example(**base)


def test_example_roundtrips_through_parquet(tmp_path):
    ex = [_example(), _example(id="t:2", expected=Expected.nothing())]
    p = write_examples(tmp_path / "e.parquet", ex)
    back = read_examples(p)
    assert back == ex
    # values of mixed JSON types survive exactly (1 stays int, 1.0 stays float)
    vals = back[0].expected.alternatives[0][0].args["a"].values
    assert [type(v) for v in vals] == [int, float]


def test_output_and_label_roundtrip(tmp_path):
    outs = [
        Output(example_id="t:1", model="m", raw=[{"f": '{"a": 1}'}], calls=[Call(name="f", arguments={"a": 1})],
               decoder="native_fc", usage=Usage(input_tokens=3, output_tokens=4), latency_s=0.5),
        Output(example_id="t:2", model="m", raw="sorry", decode_error="no call found"),
    ]
    assert read_outputs(write_outputs(tmp_path / "o.parquet", outs)) == outs
    # missing usage stays missing, never zero
    assert read_outputs(tmp_path / "o.parquet")[1].usage.input_tokens is None
    labels = [Label(example_id="t:1", model="m", correct=True, reason="ok", cost_usd=None)]
    assert read_labels(write_labels(tmp_path / "l.parquet", labels)) == labels


def test_id_must_be_source_prefixed():
    with pytest.raises(ValidationError, match="source-prefixed"):
        _example(id="1")


def test_expected_rejects_contradictions():
    with pytest.raises(ValidationError, match="exactly one"):
        Expected(no_call=True, alternatives=[[ExpectedCall(name="f")]])
    with pytest.raises(ValidationError, match="exactly one"):
        Expected()
    with pytest.raises(ValidationError, match="acceptable value"):
        ExpectedArg(values=[])


def test_output_needs_calls_or_error():
    with pytest.raises(ValidationError, match="exactly one"):
        Output(example_id="t:1", model="m", raw="x")
    with pytest.raises(ValidationError):
        Usage(input_tokens=-1)


def test_tool_calls_only_on_assistant():
    with pytest.raises(ValidationError, match="assistant"):
        Message(role="user", content="x", tool_calls=[Call(name="f")])


def test_read_reports_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="Example"):
        read_examples(tmp_path / "nope.parquet")


def test_any_call_is_exclusive():
    assert Expected.anything().any_call
    with pytest.raises(ValidationError, match="exactly one"):
        Expected(any_call=True, no_call=True)


def test_reading_names_the_file_row_and_missing_columns(tmp_path):
    import pandas as pd

    labels = [Label(example_id="t:1", model="m", correct=True, reason="ok", cost_usd=0.1),
              Label(example_id="t:2", model="m", correct=False, reason="wrong_value", cost_usd=None)]
    p = write_labels(tmp_path / "l.parquet", labels)
    df = pd.read_parquet(p)
    df.drop(columns=["reason"]).to_parquet(tmp_path / "no_reason.parquet")
    with pytest.raises(ValueError, match=r"no_reason.parquet: missing column\(s\) \['reason'\] for Label"):
        read_labels(tmp_path / "no_reason.parquet")
    df.loc[1, "cost_usd"] = -1.0
    df.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: row 1: invalid Label"):
        read_labels(tmp_path / "bad.parquet")
