"""The decoders and the importer over the real recorded outputs (71 models × 1,630 BFCL v1 queries).

    .venv/bin/python -m pytest -q tests/data/decoders/test_real.py

Guarantee: every output that BFCL's own checker marked valid (outside `relevance`)
decodes to calls, and those calls name the expected functions. Three known flaws of
the v1 answer files are allowed for by `_name_key`: parallel answers keyed
`calculate_bmi 1`, `calculate_bmi 2`; `javascript_41` expects `queue` for the tool
`queue_1`; `simple_363` expects `find_closest` for `restaurant_search.find_closest`.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from data.recorded import ImportReport, import_recorded
from data.sources import read_source

pytestmark = pytest.mark.slow

N_MODELS, N_QUERIES = 71, 1_630


@pytest.fixture(scope="module")
def v1(shared_data):
    examples = {e.id: e for e in read_source("bfcl_v1", str(shared_data / "bfcl_v1"))}
    report = ImportReport()
    outputs = import_recorded(
        shared_data / "bfcl_v1_pool_outputs_2024-08-11", examples=examples, report=report, progress=False
    )
    verdicts = {}
    with open(shared_data / "bfcl_v1_checker_verdicts_2024-08-11.jsonl") as fh:
        for line in fh:
            v = json.loads(line)
            verdicts[(v["model"], f"bfcl_v1:{v['id']}")] = v["valid"]
    return examples, outputs, report, verdicts


def _name_key(name: str) -> str:
    return re.sub(r"[ _]\d+$", "", name).rsplit(".", 1)[-1]


def test_every_output_is_imported(v1):
    examples, outputs, report, verdicts = v1
    assert len(outputs) == N_MODELS * N_QUERIES == 115_730
    assert len(report.outputs) == N_MODELS and set(report.outputs.values()) == {N_QUERIES}
    assert not report.skipped
    assert {(o.model, o.example_id) for o in outputs} == set(verdicts)


def test_usage_is_none_where_not_recorded(v1):
    _, outputs, _, _ = v1
    out = {(o.model, o.example_id): o for o in outputs}
    gpt = out[("gpt-4o-2024-05-13", "bfcl_v1:simple_0")]
    assert (gpt.usage.input_tokens, gpt.usage.output_tokens) == (315, 12)
    assert gpt.latency_s == pytest.approx(0.5079879760742188)
    llama = out[("meta-llama_Meta-Llama-3-70B-Instruct", "bfcl_v1:simple_0")]
    assert llama.usage.input_tokens is None and llama.latency_s is None  # no counts recorded
    raven = out[("Nexusflow-Raven-v2", "bfcl_v1:simple_0")]
    assert raven.usage.output_tokens is None and raven.usage.input_tokens is None  # recorded 0/0: not measured
    assert raven.latency_s == pytest.approx(0.8102860450744629)
    assert all(o.usage.input_tokens != 0 for o in outputs)
    assert sum(o.usage.known for o in outputs) == 92_769  # rows with real counts (API models)


def test_valid_outputs_decode_to_the_expected_functions(v1):
    examples, outputs, _, verdicts = v1
    failures, wrong_names, checked = [], [], 0
    for o in outputs:
        ex = examples[o.example_id]
        if ex.category == "relevance" or not verdicts[(o.model, o.example_id)]:
            continue
        checked += 1
        if o.calls is None:
            failures.append((o.model, o.example_id, o.decode_error))
            continue
        got = sorted(_name_key(c.name) for c in o.calls)
        if got not in [sorted(_name_key(c.name) for c in alt) for alt in ex.expected.alternatives]:
            wrong_names.append((o.model, o.example_id, got))
    assert checked == 73_239  # BFCL-valid outputs outside relevance
    assert failures == []
    assert wrong_names == []


def test_names_are_mapped_back_to_the_tools_in_scope(v1):
    examples, outputs, _, _ = v1
    out = {(o.model, o.example_id): o for o in outputs}
    # BFCL sent `spotify.play` as `spotify_play` to function-calling APIs.
    fc = out[("gpt-4o-2024-05-13-FC", "bfcl_v1:parallel_function_0")]
    assert [c.name for c in fc.calls] == ["spotify.play", "spotify.play"]
    assert fc.raw[0] == {"spotify_play": '{"artist": "Taylor Swift", "duration": 20}'}  # raw kept as recorded


def test_decode_rate_and_formats(v1):
    _, outputs, report, _ = v1
    by_decoder = Counter(o.decoder for o in outputs if o.calls is not None)
    assert set(by_decoder) >= {"python", "native_fc", "xlam", "hermes", "chatml", "granite", "glm", "json_calls", "java", "javascript"}
    assert report.decode_rate() > 0.85
    # Every failure says which kind it is.
    kinds = Counter(o.decode_error.split(":", 1)[0] for o in outputs if o.calls is None)
    assert set(kinds) <= {"no_call", "malformed", "no_answer"}
    assert report.no_answer == {"firefunction-v2-FC": 2}  # its two recorded "Error during inference" lines
