"""`switchcraft serve`: --host/--port, and a port in use refused before anything says the gateway is up (the tiny
router is over the 2024 pool).

    .venv/bin/python -m pytest tests/switchcraft/test_cli_serve.py -q
"""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

import serving.app
from switchcraft.cli import app

pytestmark = pytest.mark.integration


def _args(exported, tmp_path) -> list[str]:
    return [f"router.dir={exported[0]}", "upstream.pool=configs/pool.yaml", "auth.mode=none", "state.path=null", "state.redis_url=null",
            f"log.path={tmp_path / 'log'}", "explore.rate=0"]


def test_a_port_in_use_fails_before_the_banner(exported, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = CliRunner().invoke(app, ["serve", "--port", str(port), *_args(exported, tmp_path)])
    assert r.exit_code == 1, r.output
    assert f"cannot listen on 127.0.0.1:{port}" in r.output
    assert "switchcraft gateway on" not in r.output


def test_host_and_port_options_set_where_it_listens(exported, tmp_path, monkeypatch):
    served = {}
    monkeypatch.setattr(serving.app, "run_served",
                        lambda cfg, app_, client, sock: served.update(cfg=cfg, at=sock.getsockname()) or sock.close())
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    r = CliRunner().invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port), *_args(exported, tmp_path)])
    assert r.exit_code == 0, r.output
    assert served["at"] == ("127.0.0.1", port) and served["cfg"].port == port
    assert f"switchcraft gateway on http://127.0.0.1:{port}" in r.output


def test_export_without_benchmark_data_says_what_to_give_and_takes_examples(tiny_router_dir, bfcl_examples, tmp_path):
    from data.schema import write_examples

    args = ["export", str(tiny_router_dir), "--out", str(tmp_path / "onnx"), "--data-root", str(tmp_path / "none"),
            "--validate", "8"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1
    words = " ".join(r.output.split())
    assert "no requests to validate the export on" in words and "--examples FILE" in words and "--path" not in words
    write_examples(tmp_path / "examples.parquet", bfcl_examples[:40])
    r = CliRunner().invoke(app, [*args, "--examples", str(tmp_path / "examples.parquet")])
    assert r.exit_code == 0, r.output
    assert "validating on 8 requests of" in " ".join(r.output.split()) and (tmp_path / "onnx" / "router.onnx").exists()
