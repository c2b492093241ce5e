"""`switchcraft learn`: its rollout verdict (keep the router in service when the learned one is less accurate or
dearer beyond the paired intervals; the verifier's labels decide where the held-out requests have them), and how
many more requests it asks for when too few were explored.

    .venv/bin/python -m pytest tests/evaluation/jobs/test_learn.py -q
"""

from __future__ import annotations

import json

from evaluation.jobs.learn import rollout_verdict, stamp_rollout, too_few_explored


def ci(mean: float, low: float, high: float) -> dict:
    return {"mean": mean, "low": low, "high": high}


def comparison(acc: dict, usd: dict, true: dict | None = None) -> dict:
    return {"n": 40, "new_minus_in_service_consensus": acc, "new_minus_in_service_usd_per_million": usd,
            **({"new_minus_in_service_true": true} if true else {})}


def test_less_accurate_beyond_the_interval_keeps_the_router_in_service():
    v = rollout_verdict(comparison(ci(-0.10, -0.20, -0.02), ci(-50.0, -80.0, -20.0)))
    assert v["verdict"] == "keep" and v["why"].startswith("less accurate than the router in service (consensus")
    assert v["scoring"] == "consensus" and v["n"] == 40


def test_dearer_beyond_the_interval_keeps_it_even_when_accuracy_is_not_worse():
    v = rollout_verdict(comparison(ci(-0.10, -0.25, 0.0), ci(52.0, 11.0, 95.0)))
    assert v["verdict"] == "keep" and v["why"].startswith("dearer than the router in service: Δ $+52/M [+11, +95]")


def test_not_worse_and_not_dearer_rolls_out():
    v = rollout_verdict(comparison(ci(0.02, -0.03, 0.08), ci(-10.0, -40.0, 5.0)))
    assert v["verdict"] == "roll_out" and "neither less accurate nor dearer" in v["why"]


def test_the_verifiers_labels_decide_where_they_exist():
    v = rollout_verdict(comparison(ci(0.05, 0.01, 0.09), ci(0.0, -5.0, 5.0), true=ci(-0.08, -0.15, -0.01)))
    assert v["verdict"] == "keep" and v["scoring"] == "true" and "(true labels)" in v["why"]


def test_nothing_compared_keeps_the_router_in_service():
    assert rollout_verdict({"n": 0})["verdict"] == "keep"


def test_the_verdict_is_stamped_into_the_learned_routers_json(tmp_path):
    (tmp_path / "router.json").write_text(json.dumps({"models": ["a"]}))
    stamp_rollout(tmp_path, {"verdict": "keep", "why": "x"})
    assert json.loads((tmp_path / "router.json").read_text()) == {"models": ["a"], "rollout": {"verdict": "keep",
                                                                                               "why": "x"}}


def test_too_few_explored_requests_says_how_many_more_to_serve():
    assert too_few_explored(10, 200) == ("only 10 of 200 logged requests were answered by every pool model "
                                         "(exploration asks them all); at least 40 are needed: about 600 more logged "
                                         "requests at this log's explored share (5.0%)")
    assert too_few_explored(0, 1_500).endswith("no request was explored so far")
