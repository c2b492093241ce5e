"""Our verifier against BFCL's checker on the 2025 BFCL v3 run: v3's classing rules on tiny cases, and the
real run's figures.

    .venv/bin/python -m pytest -q tests/data/test_bfcl_v3_agreement.py
"""

from __future__ import annotations

import pytest

from data.decoders import no_answer_error
from data.schema import Call, Example, Expected, ExpectedArg, ExpectedCall, Message, Output, Tool
from data.verify.bfcl_v3_agreement import CLASSES, compare_v3, run_v3_agreement

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


@pytest.mark.slow
def test_real_run(shared_data):
    run = shared_data / "bfcl_v3_pool_outputs_2025-08"
    rep = run_v3_agreement(run / "data", run / "outputs", run / "checker_verdicts.jsonl")
    assert len(rep.unmatched) == 2641  # grok-4 has no score files
    assert rep.compared == 54_118 and sum(rep.no_answer.values()) == 497
    assert sum(rep.no_answer_passed.values()) == 384  # all of them where no call is expected
    assert rep.overall > 0.958
    causes = rep.by_cause()
    assert causes["our bug"] <= 1, [r for r in rep.rows if r["cause"] == "our bug"]
    assert rep.bfcl["Qwen_Qwen3-32B"] / rep.judged["Qwen_Qwen3-32B"] == pytest.approx(0.846, abs=5e-4)
