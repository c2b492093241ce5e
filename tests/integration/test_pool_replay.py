"""The runner against the replay server over real HTTP: the default 8-model pool on a BFCL v1 sample.

.venv/bin/python -m pytest -q tests/integration/test_pool_replay.py
"""

from __future__ import annotations

import json

import pytest

from data.pool_runner import CallStore, run_pool
from data.replay.serve import ReplayServer, build_state
from data.schema import read_outputs
from tests.integration.conftest import SECRET, pool_at, sample_examples

pytestmark = pytest.mark.integration
def test_replayed_run_equals_recordings_byte_for_byte(
    tmp_path, keys, bfcl_examples, pool_recordings, recordings_dir, default_pool
):
    state = build_state(
        None, bfcl_examples, pool=default_pool, recordings=pool_recordings, api_key=SECRET
    )
    sample = sample_examples(bfcl_examples, state.recordings)
    assert len(sample) >= 25
    with ReplayServer(state) as srv:
        pool = pool_at(default_pool, srv.base_url)
        summary = run_pool(
            pool, sample, tmp_path / "calls.sqlite", out=tmp_path / "out.parquet", progress=False
        )
        assert summary.complete and summary.calls_made == 8 * len(sample)
        # A second run finds everything stored and sends nothing.
        again = run_pool(
            pool, sample, tmp_path / "calls.sqlite", out=tmp_path / "out2.parquet", progress=False
        )
        assert again.calls_made == 0 and again.complete
    outputs = read_outputs(tmp_path / "out.parquet")
    assert len(outputs) == 8 * len(sample)
    assert len({(o.example_id, o.model) for o in outputs}) == len(outputs)
    for o in outputs:
        rec = state.recordings[default_pool.get(o.model).recording][o.example_id]
        assert json.dumps(o.raw) == json.dumps(rec.raw), (o.model, o.example_id)
        assert type(o.raw) is type(rec.raw)
        assert o.usage == rec.usage and o.usage.reasoning_tokens is None
        assert (o.calls is None) != (o.decode_error is None)
    # every call generated exactly once, none re-asked
    assert set(state.completions.values()) == {1} and set(state.requests.values()) == {1}
    assert sum(state.completions.values()) == 8 * len(sample)
    assert read_outputs(tmp_path / "out2.parquet") == outputs
    record = json.loads((tmp_path / "out.json").read_text())  # the run's record beside its outputs
    assert record["summary"]["complete"] and record["examples"] == len(sample)
    assert [m["name"] for m in record["pool"]["models"]] == default_pool.names
    assert SECRET not in (tmp_path / "out.json").read_text()
    # and straight from the result files, independent of any importer
    ours = {(o.model, o.example_id): o for o in outputs}
    checked = 0
    for (model, ex_id), o in ours.items():
        category = ex_id.split(":", 1)[1].rsplit("_", 1)[0]
        for line in (recordings_dir / model / f"{category}.jsonl").read_text().splitlines():
            row = json.loads(line)
            if f"bfcl_v1:{row['id']}" == ex_id:
                assert json.dumps(o.raw) == json.dumps(row["result"])
                if row.get("input_token_count"):
                    assert (o.usage.input_tokens, o.usage.output_tokens) == (
                        row["input_token_count"],
                        row["output_token_count"],
                    )
                checked += 1
    assert checked == len(ours)


def test_matches_import_recorded(
    tmp_path, keys, bfcl_examples, pool_recordings, recordings_dir, default_pool
):
    """Cross-check with the project's importer of recorded outputs: same raw, same usage."""
    from data import recorded  # the project's own module: a broken import is a failure, not a skip

    state = build_state(None, bfcl_examples, pool=default_pool, recordings=pool_recordings)
    sample = sample_examples(bfcl_examples, state.recordings, per_category=1, pairs=1)
    with ReplayServer(state) as srv:
        run_pool(
            pool_at(default_pool, srv.base_url),
            sample,
            tmp_path / "c.sqlite",
            out=tmp_path / "o.parquet",
            progress=False,
        )
    ours = {(o.model, o.example_id): o for o in read_outputs(tmp_path / "o.parquet")}
    theirs = recorded.import_recorded(
        recordings_dir,
        examples={e.id: e for e in sample},
        models=[m.recording for m in default_pool.models],
    )
    theirs = {(o.model, o.example_id): o for o in theirs if o.example_id in {e.id for e in sample}}
    assert len(theirs) == len(ours)
    for key, o in ours.items():
        assert json.dumps(o.raw) == json.dumps(theirs[key].raw) and o.usage == theirs[key].usage
        assert o.calls == theirs[key].calls


def test_budget_stops_cleanly_then_resumes(
    tmp_path, keys, bfcl_examples, pool_recordings, default_pool
):
    state = build_state(None, bfcl_examples, pool=default_pool, recordings=pool_recordings)
    sample = bfcl_examples[:12]
    with ReplayServer(state) as srv:
        pool = pool_at(default_pool, srv.base_url, concurrency=2)
        first = run_pool(pool, sample, tmp_path / "c.sqlite", max_usd=0.3, progress=False)
        assert first.budget_stop and not first.complete
        store = CallStore(tmp_path / "c.sqlite")
        spent = store.spent_usd()
        n_done = sum(1 for _ in store.calls("done"))
        store.close()
        assert 0 < spent <= 0.3 and 0 < n_done < 8 * len(sample)
        assert first.calls_made == n_done
        second = run_pool(
            pool,
            sample,
            tmp_path / "c.sqlite",
            max_usd=10,
            out=tmp_path / "o.parquet",
            progress=False,
        )
    assert second.complete and second.calls_made == 8 * len(sample) - n_done
    assert set(state.completions.values()) == {1}
    assert len(read_outputs(tmp_path / "o.parquet")) == 8 * len(sample)
