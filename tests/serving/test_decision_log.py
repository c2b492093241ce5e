"""The decision log on its own: rows as written, rotation and its bound, a full queue that drops instead of blocking.

    .venv/bin/python -m pytest -q tests/serving/test_decision_log.py
"""

from __future__ import annotations

import asyncio
import json

from data.schema import Call, Message, Tool, Usage
from serving.gateway.answers import Answer
from serving.gateway.cascade import CallRecord, Run
from data.logged import log_files, read_log
from serving.core.decision_log import DecisionLog
from serving.core.metrics import GatewayMetrics
from serving.core.record import Served
from serving.gateway.upstream import Attempt
from training.policy import Strategy

TOOL = Tool(name="get_weather", description="Weather in a city", parameters={"type": "object", "properties": {
    "city": {"type": "string"}}})


def served(i: int) -> Served:
    rec = CallRecord("m1", "first", Attempt("m1", "ok", 200, 12.5),
                     Answer({}, "[get_weather(city='Paris')]", [Call(name="get_weather", arguments={"city": "Paris"})],
                            "python", None, Usage(input_tokens=100, output_tokens=9)), cost_usd=0.001)
    skipped = CallRecord("m2", "fallback", Attempt("m2", "circuit_open", None, 0.0))
    run = Run(Strategy.single("m1"), calls=[rec, skipped], returned=rec, rule="single")
    return Served(f"r{i}", "acme", 1_764_600_000.0 + i, 20.0, 200, "v1", body={"metadata": {"example_id": f"bfcl_v1:x_{i}"}},
                  messages=[Message(role="user", content=f"weather in Paris? ({i})" + "x" * 2000)], tools=[TOOL],
                  meta={"routed": True, "chosen": "m1", "decision": {"rule": "threshold"},
                        "strategy": {"name": "single(m1)"}}, run=run)


def test_rows_carry_the_decision_every_sent_call_and_the_text_only_when_asked(tmp_path):
    async def go():
        with_text, without = DecisionLog(tmp_path / "a", keep_requests=True), DecisionLog(tmp_path / "b")
        for log in (with_text, without):
            log(served(0))
            await log.aclose()
    asyncio.run(go())
    requests, answers = read_log(tmp_path / "a")
    (r,) = requests
    assert (r["request_id"], r["key_id"], r["example_id"], r["chosen"], r["answered_by"], r["rule"]) == (
        "r0", "acme", "bfcl_v1:x_0", "m1", "m1", "threshold")
    assert json.loads(r["request"])["tools"][0]["name"] == "get_weather"
    (a,) = answers  # the skipped call (never sent) is not an answer
    assert (a["model"], a["outcome"], a["input_tokens"], a["output_tokens"]) == ("m1", "ok", 100, 9)
    assert json.loads(a["calls"]) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert read_log(tmp_path / "b")[0][0]["request"] is None


def test_the_log_rotates_and_keeps_at_most_keep_old_files(tmp_path):
    async def go():
        log = DecisionLog(tmp_path, keep_requests=True, max_mb=32 / 1024, keep=2)  # 32 KiB a file
        for i in range(120):
            log(served(i))
            await log.flush()
        await log.aclose()
        return log.written
    assert asyncio.run(go()) == 120
    files = log_files(tmp_path)
    assert 2 <= len(files) <= 3 and files[-1].name == "decisions.sqlite"  # two rotated + the current one
    requests, _ = read_log(tmp_path)
    ids = [int(r["request_id"][1:]) for r in requests]
    assert ids == sorted(ids) and ids[-1] == 119 and len(ids) < 120  # the oldest were rotated away, in order


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path):
    metrics = GatewayMetrics()

    async def go():
        log = DecisionLog(tmp_path, queue=3, metrics=metrics)
        for i in range(10):  # no await in between: the writer cannot drain
            log(served(i))
        await log.aclose()
    asyncio.run(go())
    assert metrics.decision_log_dropped._value.get() == 7
    assert len(read_log(tmp_path)[0]) == 3


def test_workers_write_a_file_each_rotate_only_their_own_and_are_read_as_one_log(tmp_path):
    """Several workers (shared): slots 0 and 1 while both live, the slot freed when its writer closes; each rotates
    its own files (keep counts its own) and every row names its writer."""
    async def go():
        first = DecisionLog(tmp_path, max_mb=32 / 1024, keep=1, keep_requests=True, replica="gw:1", shared=True)
        second = DecisionLog(tmp_path, replica="gw:2", shared=True)
        assert (first.slot, second.slot) == (0, 1) and first.path.name == "decisions-0.sqlite"
        for i in range(60):  # the first rotates (32 KiB a file), the second writes one row
            first(served(i))
            await first.flush()
        second(served(1000))
        await second.aclose()
        third = DecisionLog(tmp_path, shared=True)  # a replaced worker takes the freed slot, and its file
        assert third.slot == 1
        await third.aclose()
        await first.aclose()
    asyncio.run(go())
    names = [p.name for p in log_files(tmp_path)]
    rotated = [n for n in names if n.startswith("decisions-0.") and n != "decisions-0.sqlite"]
    assert len(rotated) == 1 and names[-2:] == ["decisions-0.sqlite", "decisions-1.sqlite"]  # keep=1: its own
    requests, _ = read_log(tmp_path)
    by = {r["request_id"]: r["replica"] for r in requests}
    assert by["r1000"] == "gw:2" and by["r59"] == "gw:1" and len(requests) < 61
