"""`switchcraft data fetch`: the plan (which upstream file goes where), and the by-hand message when offline."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from switchcraft.cli import app
from switchcraft.cli_fetch import plan

CONFETTI_COMMIT = "1fe163c0aba25d192e2c57cb31ade246a217f0cf"


def test_plan_maps_upstream_files_to_the_adapters_layout(tmp_path):
    files = plan(tmp_path)
    by_target = {d.target.relative_to(tmp_path).as_posix(): d for d in files}
    simple = by_target["bfcl_v1/questions/simple.jsonl"]
    assert simple.url == ("https://raw.githubusercontent.com/ShishirPatil/gorilla/e8c9c5a9ef15e60d9ea725f578c4b4959f0fb37b/"
                          "berkeley-function-call-leaderboard/data/gorilla_openfunctions_v1_test_simple.json")
    # relevance and executable_* have no answer file upstream
    assert sum(t.startswith("bfcl_v1/questions/") for t in by_target) == 11
    assert sum(t.startswith("bfcl_v1/possible_answer/") for t in by_target) == 6
    q = by_target["confetti/BFCL_v2_conversationsclean.json"]
    assert q.url.endswith(f"amazon-science/confetti/{CONFETTI_COMMIT}/data/BFCL_v2_conversationsclean.json")
    assert "glaive/glaive_toolcall_en_demo.json" in by_target and "xlam/xlam_train.json" in by_target
    assert {d.source for d in plan(tmp_path, ["confetti"])} == {"confetti"}
    with pytest.raises(ValueError, match="unknown source.*known: bfcl_v1"):
        plan(tmp_path, ["nope"])


def test_offline_failure_says_what_to_download_by_hand(tmp_path):
    # Loopback port 9 (discard) refuses connections: no network is touched.
    result = CliRunner().invoke(app, ["data", "fetch", "--dest", str(tmp_path), "--source", "confetti",
                                      "--base-url", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    out = result.output
    assert "could not download 4 file(s); fetch them by hand" in out
    for name in ("BFCL_v2_conversationsclean.json", "BFCL_v2_dialogacts.json"):
        assert f"http://127.0.0.1:9/amazon-science/confetti/{CONFETTI_COMMIT}/data/{name} -> {tmp_path / 'confetti' / name}" in out
        assert f"https://github.com/amazon-science/confetti/blob/{CONFETTI_COMMIT}/data/{name}" in out
    assert not any(Path(tmp_path).rglob("*.json"))  # nothing half-written


def test_existing_files_are_kept(tmp_path):
    target = tmp_path / "glaive" / "glaive_toolcall_en_demo.json"
    target.parent.mkdir()
    target.write_text("[]")
    result = CliRunner().invoke(app, ["data", "fetch", "--dest", str(tmp_path), "--source", "glaive",
                                      "--base-url", "http://127.0.0.1:9"])
    assert result.exit_code == 0 and target.read_text() == "[]"
