"""`switchcraft pool replay-server` answers recordings against their own benchmark's questions."""

from __future__ import annotations

from data.pool import load_pool
from data.schema import Output, write_outputs
from switchcraft.cli_pool import _benchmark_of
from tests.routers import REPO


def test_the_replay_server_takes_the_questions_of_the_recordings_own_benchmark(shared_data, tmp_path):
    v3 = load_pool(REPO / "configs" / "pools" / "bfcl_v3_2025.yaml")
    assert _benchmark_of(shared_data / "bfcl_v3_pool_outputs_2025-08" / "outputs", None).name == "bfcl_v3"
    assert _benchmark_of(shared_data / "nexusbench_pool_outputs_2025-08" / "parquets", None).name == "nexusbench"
    assert _benchmark_of(None, v3).name == "bfcl_v3"  # no recordings named: the pool's benchmark
    assert _benchmark_of(None, None).name == "bfcl_v1"
    parquet = tmp_path / "outputs.parquet"  # a run's outputs: their ids say which benchmark
    write_outputs(parquet, [Output(example_id="bfcl_v3:simple_python_0", model="m", raw="[]", calls=[])])
    assert _benchmark_of(parquet, None).name == "bfcl_v3"
