"""The Hermes function-calling v1 adapter on tiny rows in its ShareGPT format (no copy is available here)."""

import json

import pytest

from data.errors import DataError
from data.sources import IngestReport, read_source

TOOLS = [{"type": "function", "function": {"name": "get_stock_price", "description": "Price of a stock",
          "parameters": {"type": "object", "properties": {"symbol": {"type": "string"}}, "required": ["symbol"]}}}]
# As the dataset writes it: the preamble names the tags, the tools are Python literals.
SYSTEM = (
    "You are a function calling AI model. You are provided with function signatures within <tools> </tools> XML tags. "
    "You may call one or more functions to assist with the user query.\n<tools>\n" + repr(TOOLS) + "\n</tools>\n"
    "For each function call return a json object with function name and arguments within <tool_call> </tool_call> tags "
    "with the following schema:\n<tool_call>\n{'arguments': <args-dict>, 'name': <function-name>}\n</tool_call>\n"
)
ROW = {
    "id": "a1b2",
    "category": "Finance", "subcategory": "Stocks", "task": "Stock prices",
    "conversations": [
        {"from": "system", "value": SYSTEM},
        {"from": "human", "value": "Prices of AAPL and MSFT?"},
        {"from": "gpt", "value": "<tool_call>\n{'arguments': {'symbol': 'AAPL'}, 'name': 'get_stock_price'}\n</tool_call>\n"
                                 "<tool_call>\n{\"name\": \"get_stock_price\", \"arguments\": {\"symbol\": \"MSFT\"}}\n</tool_call>"},
        {"from": "tool", "value": "<tool_response>\n{\"name\": \"get_stock_price\", \"content\": {\"price\": 190.1}}\n</tool_response>\n"
                                  "<tool_response>\n{\"name\": \"get_stock_price\", \"content\": {\"price\": 410.5}}\n</tool_response>"},
        {"from": "gpt", "value": "AAPL is at 190.1 and MSFT at 410.5."},
        {"from": "human", "value": "Thanks, that's all."},
        {"from": "gpt", "value": "You're welcome!"},
    ],
}


def _file(tmp_path, *rows):
    p = tmp_path / "hermes.json"
    p.write_text(json.dumps(list(rows)))  # the upstream files are JSON arrays
    return str(p)


def test_one_example_per_assistant_turn(tmp_path):
    report = IngestReport()
    ex = read_source("hermes", _file(tmp_path, ROW), report)
    assert [(e.id, e.category) for e in ex] == [
        ("hermes:a1b2:turn0", "call"), ("hermes:a1b2:turn1", "no_call"), ("hermes:a1b2:turn2", "no_call")]
    call = ex[0]
    assert [t.name for t in call.tools] == ["get_stock_price"] and call.tools[0].parameters["required"] == ["symbol"]
    assert [m.role for m in call.messages] == ["user"]  # the system turn (tools + XML format) is dropped
    assert [c.args["symbol"].values for c in call.expected.alternatives[0]] == [["AAPL"], ["MSFT"]]
    after = ex[1]
    assert [m.role for m in after.messages] == ["user", "assistant", "tool", "tool"]
    assert after.messages[2].name == "get_stock_price" and '"price": 190.1' in after.messages[2].content
    assert after.meta == {"category": "Finance", "subcategory": "Stocks", "task": "Stock prices", "turn": 1, "after_tool_result": True}
    assert ex[2].meta["after_tool_result"] is False and not report.skipped


def test_json_mode_rows_are_counted(tmp_path):
    row = {"id": "j1", "conversations": [
        {"from": "system", "value": "You are a helpful assistant that answers in JSON. <schema>{}</schema>"},
        {"from": "human", "value": "x"}, {"from": "gpt", "value": "{}"}]}
    report = IngestReport()
    assert read_source("hermes", _file(tmp_path, row), report) == []
    assert report.skipped[("hermes", "no <tools> in the system turn (not function calling)")] == 1


def test_bad_tool_call_names_line_and_field(tmp_path):
    bad = json.loads(json.dumps(ROW))
    bad["conversations"][2]["value"] = "<tool_call>\n{'arguments': {'symbol': 'AAPL'}\n</tool_call>"
    with pytest.raises(DataError, match=r"hermes\.json:2: field 'conversations\[2\]\.value'"):
        read_source("hermes", _file(tmp_path, ROW, bad))
    bad["conversations"][1]["from"] = "user"
    with pytest.raises(DataError, match=r"field 'conversations'"):
        read_source("hermes", _file(tmp_path, bad))
