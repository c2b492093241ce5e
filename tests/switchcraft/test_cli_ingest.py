"""`switchcraft ingest --all` on configs/data.yaml: every source with data here, end to end.

Its speed is measured by `switchcraft bench` style runs, not asserted here (a loaded CI
machine is not a benchmark)."""

import pandas as pd
import pytest
from typer.testing import CliRunner

from switchcraft.cli import app
from tests.conftest import REPO

TOTALS = {"bfcl_v1": 1630, "bfcl_v4": 6976, "xlam": 2685, "glaive": 560}


@pytest.mark.slow
def test_ingest_all(shared_data, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the config's paths are relative to the repository root
    out = tmp_path / "examples.parquet"
    result = CliRunner().invoke(app, ["ingest", "--all", "--data-root", str(shared_data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(out, columns=["id", "source"])
    assert df["source"].value_counts().to_dict() == TOTALS
    assert df["id"].is_unique
    # the sources with no data here are reported, not fatal
    assert "not ingested confetti" in result.output and "not ingested hermes" in result.output
