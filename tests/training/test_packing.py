"""Packing: each priority rule and the budget, checked at the token level.

    .venv/bin/python -m pytest tests/training/test_packing.py -q

The test tokenizer maps every word to one token, so `w0 … wN` is N+1 tokens
with distinct ids and the tests can see exactly which tokens survived.
"""

from __future__ import annotations

import numpy as np
import pytest

from data.schema import Call, Message, Tool
from data.tools import tool_from_doc
from tests.training.conftest import tool
from training.config import PackingSettings
from training.metadata import FEATURE_NAMES, MetadataScaler, metadata_row, request_metadata
from training.packing import N_SPECIAL, encode, pack_request
from training.signatures import tool_signature


def words(a: int, b: int) -> str:
    return " ".join(f"w{i}" for i in range(a, b))


def user(text: str) -> Message:
    return Message(role="user", content=text)


def settings(max_tokens: int, **kw) -> PackingSettings:
    return PackingSettings(max_tokens=max_tokens, **kw)


def segments(ids: list[int], tok) -> list[list[int]]:
    """Split packed ids at [SEP] after dropping [CLS]: [user, tools, turns]."""
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    out, cur = [], []
    for t in ids[1:]:
        if t == tok.sep_token_id:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    assert len(out) == 3, "always three segments"
    return out


def test_small_request_is_kept_whole_in_layout(tokenizer):
    msgs = [Message(role="system", content="w500 w501"), user(words(0, 5))]
    tools = [tool("get_weather", "weather forecast")]
    p = pack_request(msgs, tools, tokenizer, settings(128))
    u, t, h = segments(p.ids, tokenizer)
    assert u == encode(tokenizer, words(0, 5))
    assert t == encode(tokenizer, tool_signature(tools[0]) + ";")
    assert h == encode(tokenizer, "system: w500 w501")
    assert p.stats.n_tokens == len(p.ids) == 1 + 5 + len(t) + len(h) + 3
    assert not p.stats.user_truncated and p.stats.tools_dropped == [] and p.stats.turns_kept == 1


def test_long_user_turn_alone_keeps_beginning_and_end_and_fills_the_window(tokenizer):
    p = pack_request([user(words(0, 300))], [], tokenizer, settings(64))
    u, t, h = segments(p.ids, tokenizer)
    assert len(p.ids) == 64  # nothing else needs room: the cap does not bite
    assert len(u) == 64 - N_SPECIAL and t == [] and h == []
    all_ids = encode(tokenizer, words(0, 300))
    assert u == all_ids[:30] + all_ids[-30:]  # head and tail, the beginning gets the odd token
    assert p.stats.user_truncated and p.stats.user_tokens == 300 and p.stats.user_kept == 60


def test_user_turn_is_capped_only_as_far_as_tools_need_room(tokenizer):
    few = [tool("get_weather", "weather forecast")]
    p = pack_request([user(words(0, 300))], few, tokenizer, settings(100, user_cap_fraction=0.5))
    u, t, _ = segments(p.ids, tokenizer)
    assert t == encode(tokenizer, tool_signature(few[0]) + ";")
    assert len(u) == 100 - N_SPECIAL - len(t)  # the tool needs little: the user turn keeps the rest

    many = [tool(f"get_weather_{k}", "weather forecast") for k in range(10)]
    p = pack_request([user(words(0, 300))], many, tokenizer, settings(100, user_cap_fraction=0.5))
    u, t, _ = segments(p.ids, tokenizer)
    assert len(u) == 50  # the cap: 50% of the window
    assert u[:25] == encode(tokenizer, words(0, 25)) and u[-25:] == encode(tokenizer, words(275, 300))
    assert 0 < len(p.stats.tools_kept) < 10 and len(p.ids) <= 100


def test_tools_all_fitting_stay_in_given_order(tokenizer):
    tools = [tool("stock_price", "price of company shares"), tool("get_weather", "weather forecast for a city")]
    p = pack_request([user("what is the weather in the city today")], tools, tokenizer, settings(256))
    assert p.stats.tools_kept == ["stock_price", "get_weather"] and not p.stats.tools_by_relevance


def test_tools_not_all_fitting_most_relevant_first(tokenizer):
    tools = [
        tool("stock_price", "price of company shares"),
        tool("book_hotel", "book a hotel"),
        tool("get_weather", "weather forecast for a city"),
    ]
    q = "what is the weather forecast for the city today"
    sig = len(encode(tokenizer, tool_signature(tools[2]) + ";"))
    budget = N_SPECIAL + len(encode(tokenizer, q)) + sig + 2  # room for the weather tool only
    p = pack_request([user(q)], tools, tokenizer, settings(budget, user_cap_fraction=1.0))
    _, t, _ = segments(p.ids, tokenizer)
    assert p.stats.tools_by_relevance
    assert p.stats.tools_kept == ["get_weather"]
    assert p.stats.tools_dropped == ["stock_price", "book_hotel"]
    assert t == encode(tokenizer, tool_signature(tools[2]) + ";")
    assert len(p.ids) <= budget


def test_a_tool_too_long_for_the_room_is_cut_rather_than_all_dropped(tokenizer):
    long_tool = tool("get_weather", words(0, 200), required=tuple(f"p{i}" for i in range(40)))
    p = pack_request([user("weather today")], [long_tool], tokenizer, settings(48, description_words=200))
    u, t, _ = segments(p.ids, tokenizer)
    assert p.stats.tool_truncated and p.stats.tools_kept == ["get_weather"]
    assert len(p.ids) == 48
    assert t == encode(tokenizer, tool_signature(long_tool, description_words=200) + ";")[: 48 - N_SPECIAL - len(u)]


def test_other_turns_most_recent_first_shown_in_order(tokenizer):
    msgs = [
        Message(role="system", content=words(100, 120)),
        user(words(200, 210)),
        Message(role="assistant", tool_calls=[Call(name="get", arguments={})]),
        Message(role="tool", name="get", content=words(300, 305)),
        user(words(0, 4)),
    ]
    rendered = ["system: " + words(100, 120), "user: " + words(200, 210), 'assistant: call get({})',
                "tool get: " + words(300, 305)]
    lens = [len(encode(tokenizer, r)) for r in rendered]
    # Room for the two most recent turns and a bit, not for the third.
    budget = N_SPECIAL + 4 + lens[3] + lens[2] + lens[1] - 1
    p = pack_request(msgs, [], tokenizer, settings(budget))
    _, _, h = segments(p.ids, tokenizer)
    assert p.stats.turns_total == 4 and p.stats.turns_kept == 2
    assert h == encode(tokenizer, rendered[2]) + encode(tokenizer, rendered[3])  # chronological
    # Greedy stops at the first turn that does not fit: the short system turn is not picked up after it.
    msgs[0] = Message(role="system", content="w100")
    p2 = pack_request(msgs, [], tokenizer, settings(budget))
    assert p2.stats.turns_kept == 2


@pytest.mark.parametrize("seed", range(20))
def test_budget_never_exceeded(tokenizer, seed):
    rng = np.random.default_rng(seed)
    n = lambda hi: int(rng.integers(0, hi))
    msgs = [Message(role=r, content=words(0, n(80))) for r in rng.choice(["user", "assistant", "tool"], n(6))]
    msgs.append(user(words(100, 100 + n(400))))
    tools = [tool(f"t{k}", words(0, n(30)), required=tuple(f"a{j}" for j in range(n(6)))) for k in range(n(8))]
    budget = int(rng.integers(16, 200))
    p = pack_request(msgs, tools, tokenizer, settings(budget))
    assert len(p.ids) <= budget and p.stats.n_tokens == len(p.ids)
    assert p == pack_request(msgs, tools, tokenizer, settings(budget))  # deterministic


def test_signature_marks_required_enums_defaults_and_cuts_description():
    t = Tool(name="get_dimensions", description="Retrieve the dimensions of a specific building based on its name.",
             parameters={"type": "object", "required": ["building_name"], "properties": {
                 "unit": {"type": "string", "enum": ["meter", "feet", "yard", "inch"], "default": "meter"},
                 "building_name": {"type": "string", "description": "dropped"},
                 "floors": {"type": "array", "items": {"type": "integer"}}}})
    sig = tool_signature(t, description_words=4, enum_values=2)
    assert sig == ('get_dimensions(building_name: str, unit?: "meter"|"feet"|… = "meter", floors?: list[int])'
                   " - Retrieve the dimensions of …")


def test_metadata_on_the_unpacked_request_and_scaling(tokenizer):
    msgs = [Message(role="system", content="w1"), user("w1 w2 w3"),
            Message(role="assistant", tool_calls=[Call(name="f", arguments={"x": 1})]),
            Message(role="tool", name="f", content="w4"), user("w5 w6")]
    tools = [tool("f", required=("x", "y"), optional=("z",)), tool("g", required=())]
    m = request_metadata(msgs, tools, tokenizer)
    assert (m["n_tools"], m["n_turns"], m["n_params"], m["n_required_params"]) == (2, 5, 3, 2)
    assert (m["n_prior_calls"], m["has_tool_results"], m["has_system"], m["user_tokens"]) == (1, 1, 1, 2)
    assert m["total_tokens"] > m["user_tokens"]
    rows = np.array([metadata_row(m), metadata_row(request_metadata([user("w1")], [], tokenizer))])
    scaler = MetadataScaler.fit(rows)
    z = scaler.transform(rows)
    assert z.shape == (2, len(FEATURE_NAMES)) and np.allclose(z.mean(0), 0, atol=1e-6)
    i = FEATURE_NAMES.index("n_tools")
    assert scaler.log1p[i] and scaler.mean[i] == pytest.approx(np.log1p(2) / 2)
    assert MetadataScaler.from_json(scaler.to_json()) == scaler


def test_metadata_java_typed_tool(tokenizer):
    doc = {"name": "MapView.render", "description": "Render the map area with a result set controller.",
           "parameters": {"type": "dict", "required": ["controller"], "properties": {
               "controller": {"type": "IResultSetController"}, "title": {"type": "String"},
               "options": {"type": "HashMap"}, "zoom": {"type": "long"}, "extra": {"type": "any"},
               "scale": {"type": "float"}, "layers": {"type": "ArrayList", "items": {"type": "String"}}}}}
    q = "How do I render the map in `mapArea` with controller mapController, title 'Roads' and zoom 12?"
    m = request_metadata([user(q)], [tool_from_doc(doc)], tokenizer)
    # IResultSetController, String, HashMap, long, ArrayList are a typed language's; "any" is unconstrained;
    # float is Python's, neither.
    assert m["typed_lang_param_share"] == pytest.approx(5 / 7)
    assert m["any_type_param_share"] == pytest.approx(1 / 7)
    assert (m["max_tool_params"], m["n_array_params"]) == (7, 1)
    assert m["best_name_overlap"] == pytest.approx(2 / 3)  # map, view, render: map and render asked for
    assert (m["n_tools_named"], m["n_numbers"], m["n_question_marks"], m["n_quoted"]) == (1, 1, 1, 4)
    assert (m["n_commas"], m["n_conjunctions"], m["has_code_identifier"]) == (1, 1, 1)
    # A plain Python/JSON-typed schema has neither.
    m = request_metadata([user("w1")], [tool("f", required=("x", "y"))], tokenizer)
    assert (m["typed_lang_param_share"], m["any_type_param_share"], m["has_code_identifier"]) == (0, 0, 0)


def test_metadata_relevance_mismatch_and_parallel_cues(tokenizer):
    bmi = tool_from_doc({"name": "determine_body_mass_index", "description": "Calculate body mass index given weight and height.",
                         "parameters": {"type": "dict", "required": ["weight", "height"], "properties": {
                             "weight": {"type": "float"}, "height": {"type": "float"}}}})
    area = tool_from_doc({"name": "calculate_triangle_area", "description": "Calculate the area of a triangle.",
                          "parameters": {"type": "dict", "required": ["base", "height"], "properties": {
                              "base": {"type": "integer"}, "height": {"type": "integer"}}}})
    q = [user("Calculate the area of a triangle given the base is 10 meters and height is 5 meters.")]
    miss = request_metadata(q, [bmi], tokenizer)
    # Only "calculate", "given" and "height" are shared, and nothing of the tool's name: it does not fit.
    assert (miss["best_tool_overlap"], miss["best_name_overlap"], miss["n_tools_named"]) == (3, 0, 0)
    hit = request_metadata(q, [bmi, area], tokenizer)
    assert (hit["best_name_overlap"], hit["n_tools_named"]) == (1, 1)
    assert hit["best_tool_overlap"] > miss["best_tool_overlap"]
    assert (hit["n_numbers"], hit["n_conjunctions"], hit["n_question_marks"]) == (2, 1, 0)
    # Several things asked at once.
    m = request_metadata([user("Play Taylor Swift and Maroon 5, for 20 and 15 minutes respectively.")], [], tokenizer)
    assert (m["n_numbers"], m["n_conjunctions"], m["n_commas"]) == (3, 3, 1)
    assert m["best_tool_overlap"] == m["best_name_overlap"] == m["max_tool_params"] == 0
