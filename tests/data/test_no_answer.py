"""An inference error is no answer: labelled `no_answer`, never decoded, never a vote in agreement.

    .venv/bin/python -m pytest -q tests/data/test_no_answer.py

The lines are shaped like the 515 real ones in ../shared/data/bfcl_v3_pool_outputs_2025-08 (a `result`
"Error during inference: …", a `traceback`, no token counts).
"""

from __future__ import annotations

import json

from data.consensus import answers_of_outputs, consensus_labels
from data.decoders import is_no_answer, no_answer_error
from data.pool import Pool
from data.recorded import ImportReport, import_recorded
from data.schema import Call, Expected, Output, Tool
from data.verify import prepare, verify
from data.verify.agree import NoAnswer, calls_agree, disagreement_kind, effective_calls

WEATHER = Tool(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
ERROR_LINE = {"id": "live_irrelevance_0-0-0", "result": "Error during inference: Request timed out.",
              "traceback": "Traceback (most recent call last):\n  File \"x.py\", line 1\nhttpx.ReadTimeout"}
ERROR = no_answer_error(ERROR_LINE["result"])


def test_the_error_text_marks_no_answer():
    assert ERROR == "no_answer: Error during inference: Request timed out."
    assert is_no_answer(ERROR)
    assert not is_no_answer("no_call: free text") and not is_no_answer(None)


def test_no_answer_is_wrong_even_where_no_call_is_expected():
    nothing = prepare(Expected.nothing(), [WEATHER])
    assert verify(nothing, None, "no_call: free text").correct  # a refusal in words is right here
    v = verify(nothing, None, ERROR)
    assert (v.correct, v.reason) == (False, "no_answer")
    call = prepare(Expected.exact([Call(name="get_weather", arguments={"city": "Paris"})]), [WEATHER])
    assert verify(call, None, ERROR).reason == "no_answer"
    assert verify(call, None, "malformed: python: x").reason == "decode_error"


def test_no_answer_agrees_with_nothing_not_even_a_refusal():
    none = effective_calls(None, ERROR)
    assert isinstance(none, NoAnswer) and none == []
    refusal = effective_calls(None, "no_call: free text")
    assert calls_agree([WEATHER], refusal, [])  # two refusals agree: both vote "no call"
    assert not calls_agree([WEATHER], none, refusal)
    assert not calls_agree([WEATHER], refusal, none)
    assert not calls_agree([WEATHER], none, effective_calls(None, ERROR))
    assert not calls_agree([WEATHER], none, [Call(name="get_weather", arguments={"city": "Paris"})])
    # Structurally it makes no call: a cascade reads it as the side that declined.
    assert disagreement_kind([WEATHER], none, refusal) == "first_declines"
    assert disagreement_kind([WEATHER], none, effective_calls(None, ERROR)) == "first_declines"


def _out(model: str, calls, error=None) -> Output:
    return Output(example_id="t:1", model=model, raw="x", calls=calls, decode_error=error)


def test_consensus_does_not_count_no_answer_as_a_vote():
    pool = Pool.model_validate({"models": [{"name": m, "prompt_style": "prompt", "prices": {"usd_per_query": 0.001}}
                                           for m in ("a", "b", "c")]})
    outputs = [_out("a", None, "no_call: free text"), _out("b", None, ERROR), _out("c", None, ERROR)]
    rows = answers_of_outputs(outputs, pool)
    assert [r["model"] for r in rows] == ["a"]  # the two errors were not heard
    res = consensus_labels(rows, {"t:1": [WEATHER]}, models=pool.names)
    assert set(res.frame["model"]) == {"a"}
    # Given directly as answer rows, a NoAnswer is not heard either (it would otherwise back "no call").
    direct = [{"example_id": "t:1", "model": m, "calls": effective_calls(o.calls, o.decode_error)}
              for m, o in zip(pool.names, outputs)]
    assert set(consensus_labels(direct, {"t:1": [WEATHER]}, models=pool.names).frame["model"]) == {"a"}


def test_consensus_labels_an_inference_error_no_answer_without_a_vote():
    from data.consensus import to_labels

    pool = Pool.model_validate({"models": [{"name": m, "prompt_style": "prompt", "prices": {"usd_per_query": 0.001}}
                                           for m in ("a", "b", "c")]})
    outputs = [_out("a", None, "no_call: free text"), _out("b", None, ERROR), _out("c", None, ERROR)]
    res = consensus_labels(answers_of_outputs(outputs, pool), {"t:1": [WEATHER]}, models=pool.names)
    labels = to_labels(res, {("t:1", "a"): 0.001}, [("t:1", "b"), ("t:1", "c")]).set_index("model")
    assert set(labels.index) == {"a", "b", "c"}  # every output has a label, as the verifier gives one
    assert labels.loc[["b", "c"], "reason"].tolist() == ["no_answer", "no_answer"]
    assert not labels.loc[["b", "c"], "correct"].any() and labels.loc["a", "reason"] in ("ok", "consensus_wrong")


def test_the_importer_counts_inference_errors_per_model_and_never_decodes_them(tmp_path):
    folder = tmp_path / "m1"
    folder.mkdir()
    lines = [ERROR_LINE,
             {"id": "live_irrelevance_1-0-1", "result": "[get_weather(city='Paris')]", "input_token_count": 300,
              "output_token_count": 9, "latency": 1.5}]
    (folder / "BFCL_v3_live_irrelevance.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = ImportReport()
    outs = import_recorded(tmp_path, report=report, progress=False)
    assert [o.example_id for o in outs] == ["bfcl_v3:live_irrelevance_0-0-0", "bfcl_v3:live_irrelevance_1-0-1"]
    err, ok = outs
    assert err.calls is None and is_no_answer(err.decode_error) and err.raw == ERROR_LINE["result"]
    assert err.usage.input_tokens is None and err.latency_s is None
    assert ok.calls[0].arguments == {"city": "Paris"} and ok.usage.output_tokens == 9 and ok.latency_s == 1.5
    assert report.no_answer == {"m1": 1} and report.decoded == {"m1": 1}


def test_a_native_models_inference_error_is_no_answer_not_a_text_answer():
    from data.labels import label_outputs
    from data.schema import Example, Message

    pool = Pool.model_validate({"models": [{"name": "fc", "prompt_style": "native", "prices": {"usd_per_query": 0.01}}]})
    ex = Example(id="t:1", source="t", category="c", messages=[Message(role="user", content="hi")], tools=[WEATHER],
                 expected=Expected.exact([Call(name="get_weather", arguments={"city": "Paris"})]))
    err = Output(example_id="t:1", model="fc", raw=ERROR_LINE["result"], decode_error=ERROR)
    text = Output(example_id="t:1", model="fc", raw="It is sunny.", decode_error="no_call: free text")
    assert [lab.reason for lab in label_outputs([err, text], {"t:1": ex}, pool)] == ["no_answer", "decode_error"]
