"""Pool prices of every kind (per token, per GPU-second, per query) and the refusal of a pool
that its recordings cannot cost.

.venv/bin/python -m pytest -q tests/data/pool/test_prices.py
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from data.replay.cost_profile import profile_costs
from data.errors import DataError
from data.labels import label_outputs, run_labels
from data.pool import Pool, Prices, check_costable, load_pool, open_weight_prices
from data.schema import Call, Example, Expected, Message, Output, Usage, write_outputs
from data.tools import tools_from_docs

USAGE = Usage(input_tokens=1000, output_tokens=100)


def test_each_kind_of_price_costs_what_it_says():
    token = Prices(input_per_mtok=2, output_per_mtok=10)
    assert token.kind == "token" and token.cost_usd(USAGE) == pytest.approx((1000 * 2 + 100 * 10) / 1e6)
    assert token.cost_usd(Usage(), latency_s=3.0) is None  # tokens not recorded: unknown, not zero

    by_latency = Prices(gpu_usd_per_hour=36.0)
    assert by_latency.kind == "gpu_time"
    assert by_latency.cost_usd(Usage(), latency_s=2.0) == pytest.approx(2.0 * 36.0 / 3600)  # 0.02
    assert by_latency.cost_usd(USAGE) is None  # no latency recorded

    # BFCL's convention: the node's seconds per query, whatever a single request's latency was.
    bfcl = Prices(gpu_usd_per_hour=22.032, gpu_seconds_per_query=307 / 1700)
    assert bfcl.cost_usd(Usage()) == pytest.approx(0.0011052)
    assert bfcl.cost_usd(Usage(), latency_s=30.0) == pytest.approx(0.0011052)

    flat = Prices(usd_per_query=0.004)
    assert flat.kind == "query" and flat.cost_usd(Usage()) == 0.004 and flat.cost_usd(USAGE, 9.0) == 0.004


def test_output_cost_reads_usage_and_latency():
    out = Output(example_id="t:1", model="m", raw="[f(x=1)]", calls=[], usage=USAGE, latency_s=0.5)
    assert Prices(gpu_usd_per_hour=7.2).output_cost_usd(out) == pytest.approx(0.001)
    assert Prices(input_per_mtok=1, output_per_mtok=1).output_cost_usd(out) == pytest.approx(0.0011)


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        ({}, "no price; give exactly one kind"),
        ({"input_per_mtok": 1, "output_per_mtok": 1, "gpu_usd_per_hour": 22.032},
         r"prices of 2 kinds \(per GPU-second, per token\)"),
        ({"usd_per_query": 0.1, "gpu_seconds_per_query": 0.2}, "prices of 2 kinds"),
        ({"input_per_mtok": 1}, "a price per token also needs output_per_mtok"),
        ({"gpu_seconds_per_query": 0.2}, "a price per GPU-second also needs gpu_usd_per_hour"),
    ],
)
def test_a_price_has_exactly_one_complete_kind(prices, message):
    with pytest.raises(ValidationError, match=message) as e:
        Prices.model_validate(prices)
    assert "gpu_usd_per_hour: X" in str(e.value)  # the message shows the forms to use


def test_a_bad_price_in_a_pool_file_names_line_and_field(tmp_path):
    path = tmp_path / "pool.yaml"
    path.write_text("models:\n  - name: a\n    prices: {usd_per_query: 1}\n  - name: b\n    prices: {}\n")
    with pytest.raises(DataError, match=r"pool.yaml:5: field 'models.1.prices': .*no price"):
        load_pool(path)


# --- refusing a pool its recordings cannot cost -------------------------------------------


def recordings(tmp_path, models: dict[str, list[dict]]):
    """A BFCL v1 folder: <model>/simple.jsonl with the given rows."""
    root = tmp_path / "recordings"
    for model, rows in models.items():
        (root / model).mkdir(parents=True)
        (root / model / "simple.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


API_ROWS = [{"id": "simple_0", "result": "[f(x=0)]", "input_token_count": 50, "output_token_count": 5, "latency": 0.8}]
OPEN_ROWS = [{"id": "simple_0", "result": "[f(x=0)]"}, {"id": "simple_1", "result": "[f(x=1)]"}]


def pool_file(tmp_path, open_prices: str):
    path = tmp_path / "pool.yaml"
    path.write_text(
        "models:\n"
        "  - name: api\n    prices: {input_per_mtok: 1, output_per_mtok: 2}\n"
        "  - name: llama\n    recorded_as: open-llama\n"
        f"    prices: {open_prices}\n"
    )
    return path


def test_a_token_priced_open_weight_model_is_refused_naming_model_and_fix(tmp_path):
    root = recordings(tmp_path, {"api": API_ROWS, "open-llama": OPEN_ROWS})
    path = pool_file(tmp_path, "{input_per_mtok: 0.9, output_per_mtok: 0.9}")
    with pytest.raises(DataError) as e:
        check_costable(load_pool(path), root, pool_path=path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:6: field 'models.1.prices': model 'llama' is priced per token")
    assert "open-llama" in msg and "hold no token counts" in msg
    assert "prices: {gpu_usd_per_hour: 22.032, gpu_seconds_per_query: S}" in msg
    assert "prices: {usd_per_query: X}" in msg
    assert "'api'" not in msg  # the API model's recordings carry tokens


def test_the_fix_carries_bfcls_own_numbers_when_given_its_price_file(tmp_path):
    root = recordings(tmp_path, {"api": API_ROWS, "open-llama": OPEN_ROWS})
    path = pool_file(tmp_path, "{input_per_mtok: 0.9, output_per_mtok: 0.9}")
    price_file = tmp_path / "prices.json"
    price_file.write_text(json.dumps({
        "v100_x8_usd_per_hour": 22.032,
        "oss_total_latency_seconds_for_1700_queries_on_8xV100": {"open-llama": 340.0},
    }))
    with pytest.raises(DataError, match=r"gpu_usd_per_hour: 22.032, gpu_seconds_per_query: 0.2\}"):
        check_costable(load_pool(path), root, pool_path=path, price_file=price_file)


def test_a_gpu_priced_model_needs_latencies_or_seconds_per_query(tmp_path):
    root = recordings(tmp_path, {"api": API_ROWS, "open-llama": OPEN_ROWS})
    path = pool_file(tmp_path, "{gpu_usd_per_hour: 22.032}")
    with pytest.raises(DataError, match=r"'llama' is priced per GPU-second from latencies .* hold no latency"):
        check_costable(load_pool(path), root, pool_path=path)
    for fine in ("{gpu_usd_per_hour: 22.032, gpu_seconds_per_query: 0.18}", "{usd_per_query: 0.001}"):
        check_costable(load_pool(pool_file(tmp_path, fine)), root)  # no error


def test_the_check_peeks_only_until_a_row_carries_what_the_price_needs(tmp_path):
    # A broken line after the first costed row is never read: a fine model costs a peek, not a pass.
    root = recordings(tmp_path, {"api": API_ROWS, "open-llama": OPEN_ROWS})
    with (root / "api" / "simple.jsonl").open("a") as fh:
        fh.write("{not json\n")
    check_costable(load_pool(pool_file(tmp_path, "{usd_per_query: 0.001}")), root)


def test_the_check_reads_an_outputs_parquet_too(tmp_path):
    outs = [
        Output(example_id="t:1", model="api", raw="x", decode_error="no_call", usage=Usage(input_tokens=5, output_tokens=1)),
        Output(example_id="t:1", model="open-llama", raw="x", decode_error="no_call", latency_s=None),
    ]
    parquet = write_outputs(tmp_path / "outputs.parquet", outs)
    with pytest.raises(DataError, match="'llama' is priced per token"):
        check_costable(load_pool(pool_file(tmp_path, "{input_per_mtok: 1, output_per_mtok: 1}")), parquet)
    check_costable(load_pool(pool_file(tmp_path, "{gpu_usd_per_hour: 3.6, gpu_seconds_per_query: 1}")), parquet)


def test_labelling_refuses_before_reading_examples_or_outputs(tmp_path):
    root = recordings(tmp_path, {"api": API_ROWS, "open-llama": OPEN_ROWS})
    path = pool_file(tmp_path, "{input_per_mtok: 0.9, output_per_mtok: 0.9}")
    # The examples path does not exist: the price refusal comes first, so no work was started.
    with pytest.raises(DataError, match="'llama' is priced per token"):
        run_labels(path, root, tmp_path / "no-examples", tmp_path / "run")
    assert not (tmp_path / "run").exists()


# --- labels and profiles ---------------------------------------------------------------


def test_labels_of_an_open_weight_model_are_costed_from_latency():
    tools = tools_from_docs({"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}}})
    ex = Example(id="t:1", source="t", category="simple", messages=[Message(role="user", content="q")],
                 tools=tools, expected=Expected.exact([Call(name="f", arguments={"x": 1})]))
    pool = Pool.model_validate({"models": [
        {"name": "timed", "prompt_style": "prompt", "prices": {"gpu_usd_per_hour": 36.0}},
        {"name": "bfcl", "prompt_style": "prompt",
         "prices": {"gpu_usd_per_hour": 22.032, "gpu_seconds_per_query": 307 / 1700}},
    ]})
    outs = [
        Output(example_id="t:1", model=m, raw="[f(x=1)]", calls=[Call(name="f", arguments={"x": 1})], latency_s=lat)
        for m, lat in (("timed", 2.0), ("timed", None), ("bfcl", None))
    ]
    labels = label_outputs(outs, {ex.id: ex}, pool)
    assert [lab.correct for lab in labels] == [True, True, True]
    assert labels[0].cost_usd == pytest.approx(0.02)
    assert labels[1].cost_usd is None  # no latency recorded: unknown cost
    assert labels[2].cost_usd == pytest.approx(0.0011052)


def test_real_bfcl_open_weight_prices(shared_data):
    prices = open_weight_prices(shared_data / "bfcl_v1_prices_2024-08.json")
    assert len(prices) == 11
    llama = prices["meta-llama_Meta-Llama-3-70B-Instruct"]
    assert (llama.gpu_usd_per_hour, llama.gpu_seconds_per_query) == (22.032, pytest.approx(307 / 1700))
    assert llama.cost_usd(Usage()) == pytest.approx(0.0011052)
    assert (shared_data / "bfcl_v1_pool_outputs_2024-08-11" / "meta-llama_Meta-Llama-3-70B-Instruct").is_dir()


def test_a_cost_profile_refuses_prices_not_per_token():
    with pytest.raises(ValueError, match=r"\['llama'\] are not priced per token"):
        profile_costs({"api": [USAGE]}, {"api": Prices(input_per_mtok=1, output_per_mtok=1),
                                         "llama": Prices(gpu_usd_per_hour=22.032)})
