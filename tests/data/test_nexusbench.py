"""NexusBench: the source adapter (one Example per episode) and the importer (one Output and one harness Label
per episode and model), on tiny recordings written here and on the real ones in ../shared/data.

    .venv/bin/python -m pytest -q tests/data/test_nexusbench.py
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.decoders import is_no_answer
from data.labels import run_labels
from data.benchmarks.nexusbench import EpisodeReport, harness_labels, read_episodes, turn_usage
from data.pool import Pool
from data.recorded import ImportReport, import_recorded
from data.schema import read_labels
from data.sources import IngestReport, read_source

PROMPT = ("{'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Weather in Paris?'}], "
          "'tools': [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather now.', "
          "'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}]}")
OTHER = PROMPT.replace("Paris", "Rome")


def response(*, calls: str = "", content: str = "None", prompt: int, completion: int, reasoning: str = "0") -> str:
    tool_calls = (f"[ChatCompletionMessageToolCall(id='call_1', function=Function(arguments='{calls}', "
                  f"name='get_weather'), type='function')]") if calls else "None"
    return (f"ChatCompletion(id='x', choices=[Choice(finish_reason='stop', index=0, logprobs=None, "
            f"message=ChatCompletionMessage(content={content}, refusal=None, role='assistant', tool_calls={tool_calls}))], "
            f"model='m', object='chat.completion', usage=CompletionUsage(completion_tokens={completion}, "
            f"prompt_tokens={prompt}, total_tokens={prompt + completion}, completion_tokens_details="
            f"CompletionTokensDetails(reasoning_tokens={reasoning}), prompt_tokens_details=None))")


def write(root: Path, name: str, rows: list[dict]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cols = sorted({k for r in rows for k in r})
    table = pa.table({c: [r.get(c, "None") for r in rows] for c in cols})
    pq.write_table(table, root / name)
    return root / name


@pytest.fixture
def recordings(tmp_path) -> Path:
    root = tmp_path / "parquets"
    two_turns = {"prompt_0": PROMPT, "query_0": "Weather in Paris?", "Final Accuracy": "True",
                 "response_0": response(calls='{"city":"Paris"}', prompt=100, completion=10, reasoning="4"),
                 "response_1": response(content="'Sunny.'", prompt=150, completion=5, reasoning="None"),
                 "result_0": "sunny", "result_1": "END_TOKEN_PREDICTED", "ground_truth": "get_weather(city='Paris')"}
    failed = {"prompt_0": OTHER, "query_0": "Weather in Rome?", "Final Accuracy": "False",
              "response_0": "None", "result_0": "EXCEPTION: Max Retries Reached"}
    in_words = {"prompt_0": OTHER, "query_0": "Weather in Rome?", "Final Accuracy": "False",
                "response_0": response(content="'I cannot tell.'", prompt=90, completion=7), "result_0": "END"}
    write(root, "Weather_0818_m1-OpenAIFC.parquet", [two_turns, failed])
    cut_short = {**two_turns, "Final Accuracy": "False", "response_1": "None", "result_1": "Max Retries Reached"}
    write(root, "Weather_0819_m2-OpenAIFC.parquet", [in_words, cut_short])
    return root


def test_one_example_per_episode_with_first_messages_and_tools(recordings):
    report = IngestReport()
    examples = read_source("nexusbench", str(recordings), report)
    assert [e.category for e in examples] == ["Weather", "Weather"] and report.total() == 2
    paris = next(e for e in examples if "Paris" in e.question)
    assert [m.role for m in paris.messages] == ["system", "user"] and paris.tools[0].name == "get_weather"
    assert paris.expected.any_call and paris.meta["labels"] == "harness"
    assert paris.meta["ground_truth"] == "get_weather(city='Paris')"


def by_city(recordings: Path, **kwargs) -> dict:
    """(model, city asked about) -> Episode."""
    city = {e.id: e.question.split()[-1].rstrip("?") for e in read_source("nexusbench", str(recordings))}
    return {(e.output.model, city[e.output.example_id]): e for e in read_episodes(recordings, **kwargs)}


def test_the_same_episode_has_one_id_whatever_the_file_order(recordings):
    eps = read_episodes(recordings)  # m1 lists Paris first, m2 Rome first
    m1_first, m2_second = eps[0].output.example_id, eps[3].output.example_id
    assert m1_first == m2_second and m1_first.startswith("nexusbench:Weather:")
    assert len({e.output.example_id for e in eps}) == 2


def test_usage_is_summed_over_every_turn_and_the_first_turn_gives_the_calls(recordings):
    report = EpisodeReport()
    eps = by_city(recordings, report=report)
    ok = eps[("m1", "Paris")].output
    assert (ok.usage.input_tokens, ok.usage.output_tokens, ok.usage.reasoning_tokens) == (250, 15, 4)
    assert [(c.name, c.arguments) for c in ok.calls] == [("get_weather", {"city": "Paris"})]
    assert ok.latency_s is None  # the harness recorded none
    words = eps[("m2", "Rome")].output
    assert words.calls is None and words.decode_error.startswith("no_call:") and words.raw["content"] == "I cannot tell."
    failed = eps[("m1", "Rome")].output
    assert failed.calls is None and is_no_answer(failed.decode_error) and failed.usage.input_tokens is None
    assert report.no_answer == {"m1": 1} and +report.passed == {"m1": 1} and report.outputs == {"m1": 2, "m2": 2}
    assert report.later_errors == {"m2": 1} and eps[("m2", "Paris")].interrupted == "turn 1: Max Retries Reached"


def test_harness_labels_cost_every_turn(recordings):
    pool = Pool.model_validate({"models": [
        {"name": "one", "recorded_as": "m1", "prices": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}},
        {"name": "two", "recorded_as": "m2", "prices": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}}]})
    labels = {(lab.model, lab.reason): lab for lab in harness_labels(read_episodes(recordings), pool)}
    assert set(labels) == {("one", "ok"), ("one", "no_answer"), ("two", "episode_failed"), ("two", "no_answer")}
    assert labels[("one", "ok")].cost_usd == pytest.approx((250 * 1.0 + 15 * 10.0) / 1e6)
    assert labels[("one", "no_answer")].cost_usd is None and not labels[("one", "no_answer")].correct
    assert labels[("two", "episode_failed")].correct is False
    # A later request that failed cut the episode short: no answer, its first turn still paid for.
    cut = labels[("two", "no_answer")]
    assert not cut.correct and cut.detail == "cut short at turn 1: Max Retries Reached"
    assert cut.cost_usd == pytest.approx((100 * 1.0 + 10 * 10.0) / 1e6)


def test_label_command_path_and_importer_read_a_recordings_folder(recordings, tmp_path):
    pool = tmp_path / "pool.yaml"
    pool.write_text("models:\n  - name: one\n    recorded_as: m1\n    prices: {input_per_mtok: 1, output_per_mtok: 10}\n")
    run = run_labels(pool, recordings, "unused", tmp_path / "run")
    assert run.labels == 2 and {lab.reason for lab in read_labels(run.labels_path)} == {"ok", "no_answer"}
    report = ImportReport()
    outs = import_recorded(recordings, report=report, progress=False)
    assert len(outs) == 4 and report.no_answer == {"m1": 1} and report.decoded == {"m1": 1, "m2": 1}


def test_turn_usage_reads_the_last_usage_block():
    assert turn_usage(response(prompt=7, completion=3, reasoning="2")) == (7, 3, 2)
    assert turn_usage(response(prompt=7, completion=3, reasoning="None")) == (7, 3, None)
    assert turn_usage("ChatCompletion(id='x', usage=None)") is None


# --- the real recordings ---------------------------------------------------------------

PASSED = {"openai-gpt-4o-20240806": 572, "togetherai-moonshotai-Kimi-K2-Instruct": 524, "openai-gpt-4.1": 505,
          "togetherai-Qwen-Qwen3-235B-A22B-FP8": 499, "openai-o3-high": 477, "deepseek-ai-DeepSeek-V3-0324": 457,
          "deepseek-ai-DeepSeek-R1-0528": 373, "openai-o4-mini-high": 286}


@pytest.mark.slow
def test_real_recordings(shared_data):
    root = shared_data / "nexusbench_pool_outputs_2025-08" / "parquets"
    examples = {e.id: e for e in read_source("nexusbench", str(root))}
    assert len(examples) == 1124
    report = EpisodeReport()
    eps = read_episodes(root, models=list(PASSED), report=report, examples=examples)
    assert {m: report.passed[m] for m in PASSED} == PASSED  # the harness's verdicts, as PROVENANCE.md counts them
    assert all(report.outputs[m] == 1124 for m in PASSED)
    assert {e.output.example_id for e in eps} == set(examples)
    # First requests that failed ("EXCEPTION: Max Retries Reached"): no answer, not a wrong one.
    assert report.no_answer == {"togetherai-Qwen-Qwen3-235B-A22B-FP8": 65, "openai-o3-high": 2, "openai-o4-mini-high": 2}
    assert report.no_usage == {}
    assert report.later_errors == {"deepseek-ai-DeepSeek-R1-0528": 486, "deepseek-ai-DeepSeek-V3-0324": 272,
                                   "togetherai-Qwen-Qwen3-235B-A22B-FP8": 19}
    answered = [e.output for e in eps if not is_no_answer(e.output.decode_error)]
    assert all(o.usage.known and o.usage.input_tokens > 0 for o in answered)


def test_a_recordings_folder_is_checked_like_bfcl_recordings(recordings, tmp_path):
    from data.errors import DataError
    from data.pool import check_costable
    from data.recorded import check_recorded

    check_recorded(["m1", "m2"], recordings)
    with pytest.raises(DataError, match="m3"):
        check_recorded(["m1", "m3"], recordings)
    priced = Pool.model_validate({"models": [{"name": "one", "recorded_as": "m1",
                                              "prices": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}]})
    check_costable(priced, recordings)  # token counts recorded
    by_latency = Pool.model_validate({"models": [{"name": "one", "recorded_as": "m1", "prices": {"gpu_usd_per_hour": 2.0}}]})
    with pytest.raises(DataError, match="no latency"):
        check_costable(by_latency, recordings)


def test_import_outputs_by_name_reads_the_questions_itself(recordings, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from data.schema import read_outputs
    from switchcraft.cli import app
    from tests.conftest import REPO

    monkeypatch.chdir(REPO)
    out = tmp_path / "outputs.parquet"
    args = ["import-outputs", "--source", "nexusbench", "--path", str(recordings), "--out", str(out),
            "--examples", str(tmp_path / "none.parquet"), "--data-root", str(tmp_path), "--no-progress"]
    # The questions come from the data config's sources.nexusbench under --data-root: absent here, so it says so.
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and "sources.nexusbench" in result.output
    (tmp_path / "nexusbench_pool_outputs_2025-08").mkdir()
    (tmp_path / "nexusbench_pool_outputs_2025-08" / "parquets").symlink_to(recordings)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(read_outputs(out)) == 4 and "no answer" in result.output
