"""The commands end to end: `pool replay-server` as its own uvicorn process serving an
outputs.parquet (with reasoning tokens), `pool run` against it, `pool profile` on the result.

    .venv/bin/python -m pytest -q tests/integration/test_pool_cli.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from data.pool_runner.limits import RequestPacer
from data.schema import Output, Usage, read_outputs, write_examples, write_outputs
from evaluation.harness import free_port
from switchcraft.cli import app
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration
MODELS = ["gpt-4o-2024-08-06-FC", "claude-3-haiku-20240307"]


class SpyPacer(RequestPacer):
    """The run's real pacer, recording each start it grants (every value it gives `_next`, less the interval) and
    when each wait let its request go (monotonic clock, as the pacer's)."""

    made: list[SpyPacer] = []

    def __init__(self, rpm: int | None) -> None:
        self.grants: list[float] = []
        self.released: list[float] = []
        super().__init__(rpm)
        self.grants.clear()  # __init__'s own `_next = 0.0` is no grant
        SpyPacer.made.append(self)

    @property
    def _next(self) -> float:
        return self.__dict__["_next"]

    @_next.setter
    def _next(self, value: float) -> None:
        self.__dict__["_next"] = value
        self.grants.append(value - self.interval)

    async def wait(self) -> None:
        await super().wait()
        if self.interval:
            self.released.append(time.monotonic())


def test_replay_server_process_run_and_profile(tmp_path, bfcl_examples, pool_recordings, monkeypatch):
    SpyPacer.made.clear()
    monkeypatch.setattr("data.pool_runner.runner.RequestPacer", SpyPacer)
    examples = bfcl_examples[::163][:10]
    # recorded outputs as an outputs.parquet; half of them with reasoning tokens, as o1-style models report
    recorded = []
    for m in MODELS:
        for i, ex in enumerate(examples):
            rec = pool_recordings[m][ex.id]
            usage = rec.usage
            if i % 2 and usage.known:
                usage = Usage(
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens + 100,
                    reasoning_tokens=100,
                )
            recorded.append(
                Output(
                    example_id=ex.id, model=m, raw=rec.raw, decode_error="not decoded", usage=usage
                )
            )
    write_outputs(tmp_path / "recorded.parquet", recorded)
    write_examples(tmp_path / "examples.parquet", examples)
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "switchcraft.cli",
            "pool",
            "replay-server",
            "--outputs",
            str(tmp_path / "recorded.parquet"),
            "--examples",
            str(tmp_path / "examples.parquet"),
            "--port",
            str(port),
            "--fault-500",
            "0.3",
            "--seed",
            "1",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "replay server did not start"
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).json()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert sorted(d["id"] for d in models["data"]) == sorted(MODELS)
        prices = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
        (tmp_path / "pool.yaml").write_text(
            yaml.safe_dump(
                {
                    "models": [
                        {
                            "name": MODELS[0],
                            "base_url": f"http://127.0.0.1:{port}/v1",
                            "prompt_style": "native",
                            "prices": prices,
                            "concurrency": 3,
                            "send_metadata": True,
                        },
                        {
                            "name": MODELS[1],
                            "base_url": f"http://127.0.0.1:{port}/v1",
                            "prompt_style": "prompt",
                            "prices": prices,
                            "concurrency": 2,
                            "requests_per_minute": 6000,
                        },
                    ]
                }
            )
        )
        result = CliRunner().invoke(
            app,
            [
                "pool",
                "run",
                "--pool",
                str(tmp_path / "pool.yaml"),
                "--examples",
                str(tmp_path / "examples.parquet"),
                "--store",
                str(tmp_path / "calls.sqlite"),
                "--out",
                str(tmp_path / "out.parquet"),
                "--no-progress",
                "--backoff-base-s",
                "0.01",
            ],
        )
        assert result.exit_code == 0, result.output
        stats = httpx.get(f"http://127.0.0.1:{port}/_replay/stats", timeout=5).json()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert stats["completions"] == 20 and stats["outcomes"].get("500", 0) >= 2
    # requests_per_minute 6000 = one request start per 10 ms for that model, retries included. Checked on the run's
    # own pacer, not on arrival times at a server that a busy machine bunches up: every request the server saw for
    # the model had a start granted, the grants are 10 ms apart, and none was sent before its grant.
    paced = [p for p in SpyPacer.made if p.interval]
    assert len(paced) == 1 and paced[0].interval == pytest.approx(0.01)
    grants, released = paced[0].grants, paced[0].released
    arrived = sum(n for key, (n, _) in stats["per_call"].items() if key.split("|")[0] == MODELS[1])
    assert arrived >= 10 and len(grants) == len(released) == arrived
    assert all(b - a >= 0.01 - 1e-9 for a, b in zip(grants, grants[1:])), grants
    assert all(r >= g - 1e-3 for g, r in zip(sorted(grants), sorted(released)))
    assert all(c == 1 for _, c in stats["per_call"].values())
    want = {(o.model, o.example_id): o for o in recorded}
    got = read_outputs(tmp_path / "out.parquet")
    assert len(got) == 20
    for o in got:
        assert json.dumps(o.raw) == json.dumps(want[(o.model, o.example_id)].raw)
        assert o.usage == want[(o.model, o.example_id)].usage  # reasoning tokens included
    assert sum(1 for o in got if o.usage.reasoning_tokens == 100) == 10

    (tmp_path / "prices.json").write_text(json.dumps({"models": {m: prices for m in MODELS}}))
    prof = CliRunner().invoke(
        app,
        [
            "pool",
            "profile",
            "--recordings",
            str(tmp_path / "out.parquet"),
            "--prices",
            str(tmp_path / "prices.json"),
            "--out-dir",
            str(tmp_path / "prof"),
        ],
    )
    assert prof.exit_code == 0, prof.output
    table = (tmp_path / "prof" / "cost_profile.md").read_text()
    assert MODELS[0] in table and "%" in table  # a reasoning share, now that it was recorded
    assert (tmp_path / "prof" / "cost_profile.png").stat().st_size > 10_000
