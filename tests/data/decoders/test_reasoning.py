"""Decoder cases from the BFCL v3 run of 2025 (real lines, ../shared/data/bfcl_v3_pool_outputs_2025-08).

    .venv/bin/python -m pytest -q tests/data/decoders/test_reasoning.py

Reasoning models answer with `<think>` text: the answer is what follows `</think>`; a reasoning that never
closes (the model ran out of tokens) is no call, whatever calls its thinking sketches.
"""

from __future__ import annotations

from data.decoders import decode
from data.schema import Tool


def _tool(name: str, *params: str) -> Tool:
    return Tool(name=name, parameters={"type": "object", "properties": {p: {"type": "string"} for p in params}})


TTS = _tool("tts_tool", "content", "speaker", "file_name")
IMAGE = _tool("generate_image_tool", "desc", "file_name")

# Qwen3-235B-A22B-Thinking-2507 on live_multiple_242-107-3 (9,516 characters, cut here): the thinking
# writes out the calls it means to make, and the output ends before any `</think>`.
UNFINISHED = (
    "<think>\nOkay, let's see. The user wants a voice narration of the prompt \"If you could have dinner with "
    "any historical figure, who would you choose and why?\" and also a generated photo of that figure.\n\n"
    "First, I need to figure out which tools to use.\n\nSo the function calls would be:\n\n"
    "tts_tool(content=\"If you could have dinner with any historical figure, who would you choose and why?, also "
    "genart a photo of that figure\", speaker=\"female\", file_name=\"narration\")\n\ngenerate_image_tool"
)


def test_unfinished_reasoning_is_no_call_even_when_it_sketches_calls_of_tools_in_scope():
    res = decode(UNFINISHED, [TTS, IMAGE])
    assert res.calls is None and res.error == "no_call: unfinished reasoning (<think> never closed)"


def test_the_answer_after_a_closed_reasoning_block_is_decoded():
    text = UNFINISHED + "\n</think>\n\n[tts_tool(content='hello', speaker='female')]"
    res = decode(text, [TTS, IMAGE])
    assert res.decoder == "python" and [(c.name, c.arguments) for c in res.calls] == [
        ("tts_tool", {"content": "hello", "speaker": "female"})]


def test_a_closing_tag_without_an_opening_one_had_it_in_the_prompt():
    res = decode("The user wants a narration.\n</think>\n[tts_tool(content='hi')]", [TTS])
    assert res.calls[0].arguments == {"content": "hi"}


def test_reasoning_and_no_answer_after_it_is_an_empty_output():
    assert decode("<think>nothing fits</think>\n", [TTS]).error == "no_call: empty output"


def test_a_think_tag_inside_an_argument_is_data():
    res = decode("[tts_tool(content='say <think> and </think> aloud')]", [TTS])
    assert res.calls[0].arguments == {"content": "say <think> and </think> aloud"}


def test_gpt_4o_fenced_json_list_of_calls():
    # gpt-4o-2024-08-06 on simple_61, as recorded.
    raw = ('```json\n[\n    {\n        "name": "diabetes_prediction",\n        "parameters": {\n            '
           '"weight": 150,\n            "height": 70,\n            "activity_level": "lightly active"\n        }\n'
           '    }\n]\n```')
    tool = Tool(name="diabetes_prediction", parameters={"type": "object", "properties": {
        "weight": {"type": "integer"}, "height": {"type": "integer"}, "activity_level": {"type": "string"}}})
    res = decode(raw, [tool])
    assert res.calls[0].arguments == {"weight": 150, "height": 70, "activity_level": "lightly active"}


def test_deepseek_result_recorded_as_native_calls():
    # DeepSeek-R1-0528 on simple_0: the runner recorded its calls as [{name: "<json arguments>"}].
    raw = [{"calculate_triangle_area": "{\"base\": 10, \"height\": 5, \"unit\": \"units\"}"}]
    res = decode(raw, [_tool("calculate_triangle_area", "base", "height", "unit")])
    assert res.decoder == "native_fc" and res.calls[0].arguments == {"base": 10, "height": 5, "unit": "units"}


def test_unquoted_string_values_stay_malformed():
    # gpt-4.1 on live_multiple_335-132-25: not Python (BFCL's checker cannot read it either); a model error.
    res = decode("[Movies_3_FindMovies(directed_by=Taika Waititi, genre=Comedy, cast=dontcare)]",
                 [_tool("Movies_3_FindMovies", "directed_by", "genre", "cast")])
    assert res.calls is None and res.error.startswith("malformed:")


def test_with_no_tool_offered_code_in_prose_is_no_call():
    # gpt-4o-2024-08-06 on live_irrelevance_123-9-3, whose question offers no function at all ([]).
    raw = ("None of the functions provided can be used to accomplish this task. However, you can achieve this by "
           "using the Python `split()` method as follows:\n\n```python\ntemp = \"hello=good=\"\n"
           "result = temp.split('=', 1)\nprint(result)\n```\n\nThis code will split the string at the first '='.")
    assert decode(raw, []).error == "no_call: free text"
    assert decode(raw, None).calls is not None  # tools unknown: a call line may still be one
    assert decode("[split_string(text='hello=good=')]", []).calls[0].name == "split_string"  # a whole answer is a call
