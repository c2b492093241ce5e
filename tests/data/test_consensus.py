"""Consensus labels: a reliability-weighted vote over answers that agree in meaning, no expected answer.

.venv/bin/python -m pytest -q tests/data/test_consensus.py
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from data.consensus import ConsensusConfig, agreement_with_truth, consensus_labels, fit_consensus
from data.errors import DataError
from data.schema import Call, Example, Expected, Label, Message, Output, read_labels, write_examples, write_outputs
from data.tools import tools_from_docs
from switchcraft.cli import app

PLAIN = ConsensusConfig(two_coin=False, none_hypothesis=False, max_iter=1)


def agree_of(groups: list[list[int]], m: int) -> np.ndarray:
    """One query's agreement matrix: models in the same group agree."""
    a = np.eye(m, dtype=bool)
    for g in groups:
        for x in g:
            for y in g:
                a[x, y] = True
    return a


def test_one_vote_with_equal_reliabilities_is_a_weighted_plurality():
    agree = agree_of([[0, 1], [2]], 3)[None]
    con = fit_consensus(agree, config=PLAIN)
    # P({0, 1}) = .7² · .3 / (.7² · .3 + .7 · .3²) = 0.7
    assert con.p_correct[0] == pytest.approx([0.7, 0.7, 0.3])
    assert con.correct[0].tolist() == [True, True, False]
    assert con.confidence[0] == pytest.approx([0.7, 0.7, 0.7])
    assert con.support[0] == pytest.approx(0.7) and not con.abstained[0]


def test_em_learns_reliabilities_and_outvotes_a_weak_majority():
    # Models 0 and 1 agree on 30 queries, 2 and 3 answer each their own way; then one query where
    # 0 stands alone against 2 and 3 agreeing (1 not asked): the plain vote follows 2 and 3, the EM follows 0.
    rows = [agree_of([[0, 1]], 4)] * 30 + [agree_of([[2, 3]], 4)]
    agree = np.stack(rows)
    answered = np.ones((31, 4), bool)
    answered[-1, 1] = False
    plain = fit_consensus(agree, answered, config=PLAIN)
    assert plain.correct[-1].tolist() == [False, False, True, True]
    em = fit_consensus(agree, answered, config=ConsensusConfig(two_coin=False))
    assert em.correct[-1].tolist() == [True, False, False, False]
    assert em.reliability[0, 0] > 0.9 and em.reliability[0, 2] < 0.1
    assert em.iterations > 1


def test_unasked_models_get_no_label_and_no_vote():
    agree = np.stack([agree_of([[0, 1, 2]], 3), agree_of([[0, 1]], 3)])
    answered = np.array([[True, True, True], [True, True, False]])
    con = fit_consensus(agree, answered, config=PLAIN)
    assert np.isnan(con.p_correct[1, 2]) and con.correct[1].tolist() == [True, True, False]
    # Row 1 with model 2 asked and disagreeing gives the same verdict for 0 and 1, but less sure.
    asked = fit_consensus(agree, config=PLAIN)
    assert asked.p_correct[1, 0] < con.p_correct[1, 0]


def test_two_coins_separate_calling_and_declining():
    # Model 2 declines on every query and is always outvoted; where it declines with model 0, its
    # declining coin is low, so 0 and 2 together lose to 1 alone (calling, reliable).
    rows = [agree_of([[0, 1]], 3)] * 20 + [agree_of([[0, 2]], 3)]
    declined = np.zeros((21, 3), bool)
    declined[:, 2] = True
    declined[-1, 0] = True
    con = fit_consensus(np.stack(rows), declined=declined, config=ConsensusConfig(two_coin=True))
    assert con.reliability[1, 2] < 0.1 and con.reliability[0, 1] > 0.9
    assert con.correct[-1].tolist() == [False, True, False]


def test_a_model_that_never_declines_has_no_vote_where_someone_declines():
    # Models 3 and 4 never decline, even on query 1, which everyone else declines: forced tool choice. On query 0,
    # 0-2 decline and 3-6 call the same function: counting every vote the callers win 4 to 3; with 3 and 4 muted
    # (labelled, not voting) the decliners win 3 to 2.
    rows = [agree_of([[0, 1, 2], [3, 4, 5, 6]], 7), agree_of([[0, 1, 2, 5, 6], [3, 4]], 7)]
    rows += [agree_of([list(range(7))], 7)] * 10
    declined = np.zeros((12, 7), bool)
    declined[0, [0, 1, 2]] = True
    declined[1, [0, 1, 2, 5, 6]] = True
    cfg = replace(PLAIN, forced_evidence=1)
    counted = fit_consensus(np.stack(rows), declined=declined, config=replace(cfg, mute_never_decliners=False))
    assert counted.correct[0].tolist() == [False] * 3 + [True] * 4
    muted = fit_consensus(np.stack(rows), declined=declined, config=cfg)
    assert muted.correct[0].tolist() == [True] * 3 + [False] * 4
    assert not np.isnan(muted.p_correct[0, 3])  # labelled, though not voting
    # Without enough evidence of forcing (a query most others declined), nobody is muted.
    unsure = fit_consensus(np.stack(rows), declined=declined, config=replace(cfg, forced_evidence=2))
    assert unsure.correct[0].tolist() == counted.correct[0].tolist()


def test_a_stray_text_answer_does_not_mute_the_models_that_always_call():
    # Traffic that always needs a call: model 2 sometimes answers in text, nobody else ever declines. Nobody is
    # forced (no query most others declined), so the two callers outvote the stray decliner.
    rows = [agree_of([[0, 1]], 3)] * 12
    declined = np.zeros((12, 3), bool)
    declined[:6, 2] = True
    con = fit_consensus(np.stack(rows), declined=declined, config=ConsensusConfig(forced_evidence=1))
    assert con.correct[:6].tolist() == [[True, True, False]] * 6


def test_no_supported_group_abstains():
    agree = agree_of([], 4)[None]  # four different answers
    con = fit_consensus(agree, config=PLAIN)
    assert con.support[0] == pytest.approx(0.25) and con.abstained[0]


def test_bad_agreement_shape_is_refused():
    with pytest.raises(ValueError, match="n × m × m"):
        fit_consensus(np.zeros((2, 3, 4), bool))


def tools():
    return tools_from_docs({"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "number"}},
                                                        "required": ["x"]}})


def test_consensus_from_answer_rows_compares_meaning():
    t = {"q1": tools(), "q2": tools()}
    answers = pd.DataFrame([
        {"example_id": "q1", "model": "a", "calls": [Call(name="f", arguments={"x": 1})]},
        {"example_id": "q1", "model": "b", "calls": [{"name": "f", "arguments": {"x": 1.0}}]},  # 1 == 1.0
        {"example_id": "q1", "model": "c", "calls": [{"name": "f", "arguments": {"x": 2}}]},
        {"example_id": "q2", "model": "a", "calls": None},  # declines
        {"example_id": "q2", "model": "b", "calls": []},  # declines
    ])
    res = consensus_labels(answers, t, config=PLAIN)
    assert res.models == ["a", "b", "c"] and res.example_ids == ["q1", "q2"]
    f = res.frame.set_index(["example_id", "model"])
    assert f.loc[("q1", "a"), "correct"] and f.loc[("q1", "b"), "correct"] and not f.loc[("q1", "c"), "correct"]
    assert f.loc[("q1", "a"), "p_correct"] == pytest.approx(0.7)
    assert ("q2", "c") not in f.index  # not asked: no label
    assert f.loc[("q2", "a"), "correct"] and f.loc[("q2", "b"), "correct"]
    assert set(res.reliability["a"]) == {"calling", "declining"}


@pytest.mark.parametrize("rows, match", [
    ([{"example_id": "q1", "model": "a", "calls": []}, {"example_id": "q1", "model": "a", "calls": []}], "second answer"),
    ([{"example_id": "q9", "model": "a", "calls": []}], "no tools for example 'q9'"),
    ([{"example_id": "q1", "calls": []}], "no 'model'"),
    ([{"example_id": "q1", "model": "a", "calls": [3]}], "Call or a"),
])
def test_bad_answer_rows_are_named(rows, match):
    with pytest.raises(DataError, match=match):
        consensus_labels(rows, {"q1": tools()})


def test_agreement_with_truth_per_model_and_category():
    frame = pd.DataFrame({"example_id": ["q1", "q1", "q2", "q2"], "model": ["a", "b", "a", "b"],
                          "correct": [True, False, True, True], "p_correct": [0.9, 0.1, 0.8, 0.8],
                          "confidence": [0.9, 0.9, 0.8, 0.8], "abstained": [False, False, True, True]})
    truth = [Label(example_id="q1", model="a", correct=True, reason="ok"),
             Label(example_id="q1", model="b", correct=False, reason="x"),
             Label(example_id="q2", model="a", correct=True, reason="ok"),
             Label(example_id="q2", model="b", correct=False, reason="x")]
    agr = agreement_with_truth(frame, truth, {"q1": "simple", "q2": "relevance"})
    assert agr["agreement"] == 0.75 and agr["agreement_not_abstained"] == 1.0 and agr["agreement_abstained"] == 0.5
    assert agr["per_model"]["b"] == {"agreement": 0.5, "consensus_accuracy": 0.5, "true_accuracy": 0.0, "pairs": 2}
    assert agr["per_category"] == {"relevance": {"agreement": 0.5, "pairs": 2}, "simple": {"agreement": 1.0, "pairs": 2}}
    assert agr["abstained_queries"] == 1 and agr["queries"] == 2


POOL_YAML = """
models:
  - name: a
    prompt_style: prompt
    prices: {usd_per_query: 0.01}
  - name: b
    prompt_style: prompt
    prices: {usd_per_query: 0.001}
  - name: c
    prompt_style: native
    prices: {usd_per_query: 0.002}
"""


def test_label_consensus_command_writes_labels_with_confidence_and_agreement(tmp_path):
    (tmp_path / "pool.yaml").write_text(POOL_YAML)
    examples = [Example(id=f"t:{i}", source="t", category="simple", messages=[Message(role="user", content="q")],
                        tools=tools(), expected=Expected.exact([Call(name="f", arguments={"x": i})])) for i in range(3)]
    write_examples(tmp_path / "examples.parquet", examples)

    def out(model, i, x):
        if x is None:  # a native model's text: no call
            return Output(example_id=f"t:{i}", model=model, raw="sorry", decode_error="no_call: free text")
        return Output(example_id=f"t:{i}", model=model, raw=f"[f(x={x})]", calls=[Call(name="f", arguments={"x": x})])

    write_outputs(tmp_path / "outputs.parquet", [out("a", 0, 0), out("b", 0, 0), out("c", 0, 5),
                                                 out("a", 1, 1), out("b", 1, 1), out("c", 1, None),
                                                 out("a", 2, 2), out("b", 2, 2), out("c", 2, 7)])
    run = tmp_path / "run"
    run.mkdir()
    truth = [Label(example_id=f"t:{i}", model=m, correct=ok, reason="ok" if ok else "x")
             for i, m, ok in [(0, "a", True), (0, "b", True), (0, "c", False), (1, "a", True), (1, "b", True),
                              (1, "c", False), (2, "a", True), (2, "b", True), (2, "c", False)]]
    from data.schema import write_labels

    write_labels(run / "labels.parquet", truth)
    res = CliRunner().invoke(app, ["label", "--consensus", "--pool", str(tmp_path / "pool.yaml"),
                                   "--outputs", str(tmp_path / "outputs.parquet"),
                                   "--examples", str(tmp_path / "examples.parquet"), "--run-dir", str(run)])
    assert res.exit_code == 0, res.output
    assert "agreement with the verifier's labels" in res.stdout and "100.00% of 9 pairs" in res.stdout
    labels = read_labels(run / "labels_consensus.parquet")  # the Label contract
    assert [(lb.example_id, lb.model, lb.correct) for lb in labels] == [(t.example_id, t.model, t.correct) for t in truth]
    assert [lb.cost_usd for lb in labels[:3]] == [0.01, 0.001, 0.002]
    extra = pd.read_parquet(run / "labels_consensus.parquet")
    assert {"p_correct", "confidence", "abstained"} <= set(extra.columns)
    assert (extra["confidence"] >= 0.5).all()
    meta = json.loads((run / "labels_consensus.json").read_text())
    assert meta["agreement"]["agreement"] == 1.0 and meta["labels"] == 9


def test_truth_without_consensus_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["label", "--truth", str(tmp_path / "x.parquet"), "--outputs", str(tmp_path),
                                   "--examples", str(tmp_path)])
    assert res.exit_code != 0
