"""`switchcraft tools index|route` through typer's CliRunner on a local app."""

import json

import typer
from typer.testing import CliRunner

from switchcraft import cli_tools


def make_app():
    app = typer.Typer()

    @app.callback()
    def main():  # a group, so that `tools` is a subcommand as in the real CLI
        pass

    cli_tools.register(app)
    return app


def test_index_then_route(cards_file, tmp_path):
    runner, app = CliRunner(), make_app()
    idx = tmp_path / "idx"
    cfg = tmp_path / "tools.yaml"
    cfg.write_text("# test\npolicy:\n  role_permissions: {support: [payments.read]}\n")
    r = runner.invoke(app, ["tools", "index", "--config", str(cfg), "--catalog", str(cards_file), "--index-dir", str(idx)])
    assert r.exit_code == 0, r.output
    built = json.loads(r.output)
    assert built["tools"] == 8 and built["groups"] == 4
    assert (idx / built["catalog_version"] / "tool_vecs.npy").exists()

    req = tmp_path / "req.json"
    req.write_text(json.dumps({"messages": [{"role": "system", "content": "be nice"},
                                            {"role": "user", "content": "what is the status of payment 42?"}]}))
    r = runner.invoke(app, ["tools", "route", "--config", str(cfg), "--catalog", str(cards_file), "--index-dir", str(idx),
                            "--request", str(req), "--tenant", "acme", "--role", "support", "--top-k", "2"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["query"] == "what is the status of payment 42?"
    assert d["tool_keys"][0] == "payments.get_payment_status" and len(d["tool_keys"]) == 2
    assert d["catalog_version"] == built["catalog_version"]
    assert {"tool": "payments.refund_payment", "reason": "permission"} in d["hidden"]
    assert d["tools"][-1]["function"]["name"] == "request_group"


def test_route_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - {name: x, risk: nope}\n")
    r = CliRunner().invoke(make_app(), ["tools", "route", "--catalog", str(bad), "--index-dir", str(tmp_path / "i"),
                                        "--request", "hi"])
    assert r.exit_code == 1
    assert "bad.yaml:2" in r.output and "risk" in r.output


def test_set_overrides_the_tools_config(cards_file, tmp_path):
    runner, app = CliRunner(), make_app()
    cfg = tmp_path / "tools.yaml"
    cfg.write_text("retrieval:\n  top_k: 3\n")
    asks = "List the invoices of customer 7. Also, what is the weather forecast for Paris tomorrow?"
    base = ["tools", "route", "--config", str(cfg), "--catalog", str(cards_file), "--index-dir", str(tmp_path / "i"),
            "--request", asks, "--tenant", "acme", "--role", "support"]
    split = json.loads(runner.invoke(app, base).output)
    assert len(split["intents"]) == 2
    r = runner.invoke(app, [*base, "--set", "retrieval.max_intents=1", "--set", "retrieval.query_token_budget=32"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["intents"] == []
    r = runner.invoke(app, [*base, "--set", "retrieval.max_intents=0"])
    assert r.exit_code == 1 and "retrieval.max_intents" in r.output


def test_fit_fusion_names_a_bad_field_signal_or_weight(tmp_path):
    runner, app = CliRunner(), make_app()
    r = runner.invoke(app, ["tools", "fit-fusion", "--fields", "bm25,sparse", "--run-dir", str(tmp_path)])
    assert r.exit_code == 1 and "--fields: unknown signal(s) ['sparse']" in r.output
    r = runner.invoke(app, ["tools", "fit-fusion", "--run-dir", str(tmp_path),
                            "--set", "retrieval.w_bm25_fields.name=-0.5"])
    assert r.exit_code == 1 and "retrieval.w_bm25_fields.name" in r.output
    assert not any(tmp_path.iterdir())  # nothing was built or written


def test_value_says_how_to_build_a_missing_retriever(tmp_path):
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(f"encoder: {tmp_path / 'no_such_retriever'}\n")
    r = CliRunner().invoke(make_app(), ["tools", "value", "--config", str(cfg), "--run-dir", str(tmp_path / "v")])
    assert r.exit_code == 1
    assert "make tools-train" in r.output and "--retriever base" in r.output
    r = CliRunner().invoke(make_app(), ["tools", "value", "--config", str(cfg), "--retriever", "other"])
    assert r.exit_code == 1 and "base or trained" in r.output
