"""The registry of benchmarks with recordings (`data.benchmarks`): what it holds, how a folder's benchmark is told,
and a benchmark defined only here (a tiny recordings layout under a throwaway data root) taken up by the pool
loader, the data config and the importer without any other module knowing it.

    .venv/bin/python -m pytest -q tests/data/test_benchmarks.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import data.benchmarks
from data.benchmarks import detect, find, get, names, register
from data.benchmarks.lines import ResultLines
from data.config import DataConfig
from data.errors import DataError
from data.pool import check_costable, load_pool
from data.recorded import ImportReport, check_recorded, detect_layout, import_recorded
from data.registry import Registry
from data.sources import load_adapters


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_registry_lists_every_benchmark_with_its_source_and_folder():
    assert names() == ["bfcl_v1", "bfcl_v3", "bfcl_v4", "nexusbench"]
    sources = load_adapters()
    for name in names():
        bench = get(name)
        assert bench.name == name and bench.source in sources  # its questions have an ingest source
        assert bench.recordings and bench.layout
    assert [n for n in names() if get(n).in_all] == ["bfcl_v1", "bfcl_v4"]
    assert [n for n in names() if get(n).harness] == ["nexusbench"]
    assert get("bfcl_v1").earlier_run == "bfcl_v1_earlier" and get("bfcl_v3").earlier_run is None


def test_an_unknown_name_lists_the_known_ones_and_a_name_registers_once():
    with pytest.raises(DataError, match=r"unknown benchmark 'bfcl_v9'; known: bfcl_v1, bfcl_v3, bfcl_v4, nexusbench"):
        get("bfcl_v9")
    with pytest.raises(ValueError, match="benchmark 'bfcl_v1' is already registered"):
        register(type(get("bfcl_v1")))


def test_each_benchmarks_real_folder_is_detected_as_it(shared_data):
    cfg = DataConfig(data_root=str(shared_data))
    for name in names():
        root = cfg.output_path(name)
        assert root == f"{shared_data}/{get(name).recordings}"
        assert detect_layout(root) == name


def test_bfcl_v3_files_of_the_newer_runner_are_bfcl_v4s_layout(tmp_path):
    row = {"id": "simple_0", "result": "[f()]"}
    write_jsonl(tmp_path / "v3" / "m" / "BFCL_v3_simple.json", [row])
    write_jsonl(tmp_path / "v4" / "m" / "BFCL_v3_simple_result.json", [row])
    assert detect(tmp_path / "v3").name == "bfcl_v3" and detect(tmp_path / "v4").name == "bfcl_v4"


def test_a_folder_of_two_benchmarks_recordings_is_refused_not_guessed(tmp_path):
    write_jsonl(tmp_path / "m" / "simple.jsonl", [{"id": "simple_0", "result": "[f()]"}])
    write_jsonl(tmp_path / "m" / "BFCL_v3_simple.json", [{"id": "simple_0", "result": "[f()]"}])
    with pytest.raises(DataError, match=r"holds recordings of 2 benchmarks \(bfcl_v1, bfcl_v3\).*name the one"):
        detect(tmp_path)
    assert find(tmp_path / "m" / "simple.jsonl") is None  # a file is no folder of recordings
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"no recorded outputs found \(expected <model>/<category>\.jsonl \(bfcl_v1\)"):
        detect(tmp_path / "empty")


# --- a fourth benchmark, defined only here ----------------------------------------------------------------------


class Toy(ResultLines):
    """Recordings `<model>.toy.jsonl` in one flat folder, BFCL-style lines, one category."""

    name = "toy"
    source = "xlam"  # any registered source: the questions are not read here
    recordings = "toy_runs"
    layout = "<model>.toy.jsonl"

    def holds(self, root: Path) -> bool:
        return any(root.glob("*.toy.jsonl"))

    def result_files(self, root: Path) -> list[tuple[str, str, Path]]:
        return [(f.name.removesuffix(".toy.jsonl"), "simple", f) for f in sorted(root.glob("*.toy.jsonl"))]


@pytest.fixture
def toy(monkeypatch) -> type[Toy]:
    """The registry as it is plus Toy, for this test only."""
    registry: Registry = Registry("benchmark")
    for name in names():
        registry.add(name, get(name))
    monkeypatch.setattr(data.benchmarks, "BENCHMARKS", registry)
    return register(Toy)


@pytest.fixture
def data_root(tmp_path) -> Path:
    root = tmp_path / "shared"
    write_jsonl(root / "toy_runs" / "alpha.toy.jsonl", [
        {"id": "simple_0", "result": [{"get_weather": '{"city": "Paris"}'}], "input_token_count": 80,
         "output_token_count": 6, "latency": 0.4},
        {"id": "simple_1", "result": "I cannot tell."},
    ])
    write_jsonl(root / "toy_runs" / "beta.toy.jsonl", [{"id": "simple_0", "result": "[get_weather(city='Rome')]"}])
    return root


def test_a_benchmark_defined_in_one_place_is_loaded_imported_and_checked(toy, data_root, tmp_path):
    assert "toy" in names()
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text("benchmark: toy\nmodels:\n  - name: alpha\n    prices: {input_per_mtok: 1, output_per_mtok: 4}\n")
    pool = load_pool(pool_file)
    assert pool.benchmark == "toy"
    recordings = DataConfig(data_root=str(data_root)).output_path("toy")  # its folder under the data root
    assert recordings == f"{data_root}/toy_runs" and detect_layout(recordings) == "toy"
    report = ImportReport()
    outs = {(o.model, o.example_id): o for o in import_recorded(recordings, report=report, progress=False)}
    assert set(outs) == {("alpha", "toy:simple_0"), ("alpha", "toy:simple_1"), ("beta", "toy:simple_0")}
    paris = outs[("alpha", "toy:simple_0")]
    assert [(c.name, c.arguments) for c in paris.calls] == [("get_weather", {"city": "Paris"})]
    assert (paris.usage.input_tokens, paris.usage.output_tokens, paris.latency_s) == (80, 6, 0.4)
    assert outs[("beta", "toy:simple_0")].calls[0].arguments == {"city": "Rome"}
    assert outs[("alpha", "toy:simple_1")].calls is None and report.files == 2 and report.decoded == {"alpha": 1, "beta": 1}
    check_recorded(["alpha", "beta"], recordings)
    with pytest.raises(DataError, match=r"no recorded outputs for pool model\(s\) \['gamma'\]"):
        check_recorded(["alpha", "gamma"], recordings)
    check_costable(pool, recordings)  # alpha's lines carry token counts
    by_latency = load_pool(write_pool(tmp_path, "beta", "{gpu_usd_per_hour: 2}"))
    with pytest.raises(DataError, match="'beta' is priced per GPU-second from latencies but its recordings"):
        check_costable(by_latency, recordings)


def write_pool(tmp_path: Path, model: str, prices: str) -> Path:
    path = tmp_path / f"{model}.yaml"
    path.write_text(f"benchmark: toy\nmodels:\n  - name: {model}\n    prices: {prices}\n")
    return path


def test_an_unknown_benchmark_in_a_pool_file_names_file_field_and_the_known_ones(tmp_path):
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text("models:\n  - name: alpha\n    prices: {usd_per_query: 0.001}\nbenchmark: bfcl_v9\n")
    with pytest.raises(DataError) as e:
        load_pool(pool_file)
    assert str(e.value).startswith(f"{pool_file}:4: field 'benchmark': ")
    assert "unknown benchmark 'bfcl_v9'; known: bfcl_v1, bfcl_v3, bfcl_v4, nexusbench" in str(e.value)
