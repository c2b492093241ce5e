"""Our verifier against BFCL's checker on the 2025 BFCL v3 run: v3's classing rules on tiny cases, and the
real run's figures.

    .venv/bin/python -m pytest -q tests/data/verify/test_bfcl_v3_agreement.py
"""

from __future__ import annotations

import pytest

from data.decoders import no_answer_error
from data.schema import Call, Example, Expected, ExpectedArg, ExpectedCall, Message, Output, Tool
from data.verify.bfcl_v3_agreement import (CLASSES, category_table, compare_v3, run_v3_agreement,
                                           sample_disagreements)
from data.verify.bfcl_v3_revisions import find_revisions

TOOL = Tool(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}},
                                            "required": ["city"]})
PARIS = Expected(alternatives=[[ExpectedCall(name="get_weather", args={"city": ExpectedArg(values=["Paris"])})]])


def _example(qid: str, category: str, expected: Expected) -> Example:
    return Example(id=f"bfcl_v3:{qid}", source="bfcl_v3", category=category, tools=[TOOL], expected=expected,
                   messages=[Message(role="user", content="Weather in Paris?")])


def _out(qid: str, raw, calls=None, error=None) -> Output:
    return Output(example_id=f"bfcl_v3:{qid}", model="m", raw=raw, calls=calls, decode_error=error,
                  decoder="python" if calls is not None else None)


def test_classes_of_v3_pairs():
    examples = {e.id: e for e in (
        _example("simple_0", "simple", PARIS), _example("simple_1", "simple", PARIS),
        _example("live_relevance_0", "live_relevance", Expected.anything()),
        _example("irrelevance_0", "irrelevance", Expected.nothing()),
        _example("irrelevance_1", "irrelevance", Expected.nothing()))}
    paris = [Call(name="get_weather", arguments={"city": "Paris"})]
    outputs = [
        _out("simple_0", "The weather depends on the season.", error="no_call: free text"),  # BFCL passed prose
        _out("simple_1", "[get_weather(city='Paris', city='Rome')]",
             error="malformed: python: get_weather: argument 'city' given twice"),
        _out("live_relevance_0", "Sure! [get_weather(city='Paris')]", calls=paris),  # BFCL's decoder failed
        _out("irrelevance_0", "Error during inference: Request timed out.", error=no_answer_error("Error during inference: x")),
        _out("irrelevance_1", "No tool fits.", error="no_call: free text"),  # agreed: both right
    ]
    verdicts = {("m", "simple_0"): {"valid": True}, ("m", "simple_1"): {"valid": True},
                ("m", "live_relevance_0"): {"valid": False, "error_type": "relevance_error:decoder_failed"},
                ("m", "irrelevance_0"): {"valid": True}, ("m", "irrelevance_1"): {"valid": True}}
    rep = compare_v3(outputs, examples, verdicts)
    assert {(r["id"], r["class"]) for r in rep.rows} == {
        ("bfcl_v3:simple_0", "bfcl_passed_wrong_answer"), ("bfcl_v3:simple_1", "repeated_argument"),
        ("bfcl_v3:live_relevance_0", "call_format")}
    # The inference error is not compared (BFCL passed it: an error text is no call), but counts for accuracy.
    assert rep.no_answer == {"irrelevance": 1} and rep.no_answer_passed == {"irrelevance": 1}
    assert rep.compared == 4 and rep.agree == {"irrelevance": 1}
    assert rep.judged == {"m": 5} and rep.ours == {"m": 2} and rep.bfcl == {"m": 4}
    assert all(k in CLASSES for k in ("bfcl_passed_wrong_answer", "repeated_argument", "call_format"))


def test_function_calling_run_is_classed_apart_and_its_text_is_no_call():
    examples = {e.id: e for e in (
        _example("simple_0", "simple", PARIS), _example("irrelevance_0", "irrelevance", Expected.nothing()))}
    outputs = [
        # An FC run: calls as BFCL's FC result data, text otherwise; its verdicts are of a prompt-mode run.
        Output(example_id="bfcl_v3:simple_0", model="fc", raw=[{"get_weather": '{"city": "Paris"}'}],
               calls=[Call(name="get_weather", arguments={"city": "Paris"})], decoder="native_fc"),
        # Code in its prose is no tool call: right where none is expected.
        _out("irrelevance_0", "For example: get_weather(city='Paris')", calls=[Call(name="get_weather",
             arguments={"city": "Paris"})]).model_copy(update={"model": "fc"}),
    ]
    verdicts = {("fc", "simple_0"): {"valid": False, "error_type": "value_error:string",
                                     "error": "Invalid value for parameter 'city': 'Rome'."},
                ("fc", "irrelevance_0"): {"valid": True}}
    rep = compare_v3(outputs, examples, verdicts)
    assert rep.other_run == {"fc"}
    assert [(r["id"], r["class"], r["rule_class"]) for r in rep.rows] == [
        ("bfcl_v3:simple_0", "other_run_verdict", "string_canonical")]
    assert rep.agree == {"irrelevance": 1} and sum(rep.own_total.values()) == 0 and rep.own_overall == 0
    assert category_table(rep)[1][-1][:4] == ["all", "2", "50.00%", "0.00%"]


def test_spacing_only_difference_is_our_known_limit():
    hanoi = Expected(alternatives=[[ExpectedCall(name="get_weather", args={"city": ExpectedArg(values=["Ha Noi"])})]])
    examples = {"bfcl_v3:simple_0": _example("simple_0", "simple", hanoi)}
    outputs = [_out("simple_0", "[get_weather(city='Hanoi')]", calls=[Call(name="get_weather",
                                                                          arguments={"city": "Hanoi"})])]
    rep = compare_v3(outputs, examples, {("m", "simple_0"): {"valid": True}})
    assert [r["class"] for r in rep.rows] == ["spacing_variant"] and rep.by_cause()["our bug"] == 1


def test_revisions_are_measured_against_v1_answers():
    v1 = {"bfcl_v1:simple_0": _example("simple_0", "simple", PARIS).model_copy(
        update={"id": "bfcl_v1:simple_0", "source": "bfcl_v1"})}
    rome = Expected(alternatives=[[ExpectedCall(name="get_weather", args={"city": ExpectedArg(values=["Rome"])})]])
    examples = {"bfcl_v3:simple_0": _example("simple_0", "simple", rome)}
    rev = find_revisions(examples, v1)
    assert list(rev.answers) == ["bfcl_v3:simple_0"] and rev.answer == {"simple": 1} and rev.question == {"simple": 0}
    outputs = [_out("simple_0", "[get_weather(city='Rome')]", calls=[Call(name="get_weather",
                                                                         arguments={"city": "Rome"})])]
    rep = compare_v3(outputs, examples, {("m", "simple_0"): {"valid": True}}, rev)
    assert (rev.pairs, rev.flipped, rev.agree_v3, rev.agree_v1) == (1, 1, 1, 0)
    assert rep.agree == {"simple": 1}  # labels use v3's answer


def test_sample_is_seeded_and_stratified():
    rows = [{"category": c, "id": f"{c}_{i}", "model": "m"} for c, n in (("a", 40), ("b", 9), ("c", 1)) for i in range(n)]
    s = sample_disagreements(rows, 10, seed=3)
    assert s == sample_disagreements(list(reversed(rows)), 10, seed=3)  # the rows' order does not matter
    counts = {c: sum(r["category"] == c for r in s) for c in "abc"}
    assert counts == {"a": 6, "b": 3, "c": 1} and len(s) == 10  # 2 each, then 4.4 + 0.8 by largest remainders
    assert sample_disagreements(rows, 10, seed=4) != s


@pytest.mark.slow
def test_real_run(shared_data):
    run = shared_data / "bfcl_v3_pool_outputs_2025-08"
    rep = run_v3_agreement(run / "data", run / "outputs", run / "checker_verdicts.jsonl",
                           v1_questions=shared_data / "bfcl_v1")
    assert len(rep.unmatched) == 2641  # grok-4 has no score files
    assert rep.compared == 54_118 and sum(rep.no_answer.values()) == 497
    assert sum(rep.no_answer_passed.values()) == 384  # all of them where no call is expected
    assert rep.overall > 0.959 and rep.own_overall > 0.976
    # DeepSeek's recordings are a function-calling run; its verdicts, of a prompt-mode run.
    assert rep.other_run == {"deepseek-ai_DeepSeek-R1-0528", "deepseek-ai_DeepSeek-V3-0324"}
    bugs = [r for r in rep.rows if r["cause"] == "our bug"]
    assert {r["class"] for r in bugs} <= {"spacing_variant"} and len(bugs) <= 2, bugs  # 'Hanoi' / 'Ha Noi'
    assert "unexplained" not in rep.classes and "decode_difference" not in rep.classes
    assert sum(rep.revisions.answer.values()) == 39 and rep.revisions.agree_v3 > rep.revisions.agree_v1
    assert rep.bfcl["Qwen_Qwen3-32B"] / rep.judged["Qwen_Qwen3-32B"] == pytest.approx(0.846, abs=5e-4)
