"""The Glaive adapter: the real converted file, and a tiny row in the original two-string layout."""

import json

import pytest

from data.errors import DataError
from data.sources import IngestReport, read_source


def test_real_converted_file(shared_data):
    report = IngestReport()
    ex = {e.id: e for e in read_source("glaive", str(shared_data / "glaive" / "glaive_toolcall_en_demo.json"), report)}
    # 300 conversations, 957 assistant turns (746 gpt + 211 function_call)
    assert len(ex) == 560
    assert {c: n for (_, c), n in report.counts.items()} == {"call": 211, "no_call": 349}
    assert dict(report.skipped) == {("glaive", "text reply with no tools offered"): 397}
    assert sum(e.meta["after_tool_result"] for e in ex.values()) == 211
    call = ex["glaive:1:turn1"]
    assert call.category == "call" and call.question == "I have chicken, bell peppers, and rice."
    assert call.expected.alternatives[0][0].args["ingredients"].values == [["chicken", "bell peppers", "rice"]]
    after = ex["glaive:1:turn2"]
    assert after.expected.no_call and after.messages[-1].role == "tool" and after.messages[-1].name == "search_recipes"
    assert after.messages[-2].tool_calls[0].name == "search_recipes"


SYSTEM = (
    "SYSTEM: You are a helpful assistant with access to the following functions. Use them if required -\n"
    + json.dumps({"name": "convert_currency", "description": "Convert money", "parameters": {
        "type": "object", "properties": {"amount": {"type": "number"}, "to": {"type": "string"}}}}, indent=4)
    + "\n\n"
    + json.dumps({"name": "get_news", "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}}}, indent=4)
)
CHAT = (
    "USER: Can you convert some money for me?\n\n\n"
    "ASSISTANT: Sure, how much and into which currency? <|endoftext|>\n\n\n"
    "USER: 1000 USD to EUR.\n\n\n"
    "ASSISTANT: <functioncall> {\"name\": \"convert_currency\", \"arguments\": '{\"amount\": 1000, \"to\": \"EUR\"}'} <|endoftext|>\n\n\n"
    "FUNCTION RESPONSE: {\"converted_amount\": 850.0}\n\n\n"
    "ASSISTANT: 1000 USD is about 850 EUR. <|endoftext|>\n\n\n"
    "USER: And the news?\n\n\n"
    # an apostrophe inside the single-quoted arguments: not a Python literal any more
    "ASSISTANT: <functioncall> {\"name\": \"get_news\", \"arguments\": '{\"topic\": \"today's headlines\"}'} <|endoftext|>\n"
)


def _file(tmp_path, *rows):
    p = tmp_path / "glaive.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(p)


def test_original_layout(tmp_path):
    report = IngestReport()
    ex = read_source("glaive", _file(tmp_path, {"system": SYSTEM, "chat": CHAT}), report)
    assert [(e.id, e.category) for e in ex] == [
        ("glaive:1:turn0", "no_call"), ("glaive:1:turn1", "call"), ("glaive:1:turn2", "no_call"), ("glaive:1:turn3", "call")]
    assert [t.name for t in ex[0].tools] == ["convert_currency", "get_news"]
    assert ex[0].messages[0].role == "user" and ex[0].meta["layout"] == "original"  # the system turn is dropped
    conv = ex[1].expected.alternatives[0][0]
    assert conv.name == "convert_currency" and conv.args["amount"].values == [1000]
    assert ex[2].messages[-1].role == "tool" and ex[2].messages[-1].content == '{"converted_amount": 850.0}'
    assert ex[3].expected.alternatives[0][0].args["topic"].values == ["today's headlines"]
    assert [m.role for m in ex[3].messages] == ["user", "assistant", "user", "assistant", "tool", "assistant", "user"]


def test_no_tools_text_turns_are_counted(tmp_path):
    row = {"system": "SYSTEM: You are a helpful assistant, with no access to external functions.",
           "chat": "USER: Hi\n\n\nASSISTANT: Hello! <|endoftext|>\n"}
    report = IngestReport()
    assert read_source("glaive", _file(tmp_path, row), report) == []
    assert report.skipped[("glaive", "text reply with no tools offered")] == 1


def test_bad_call_names_line_and_field(tmp_path):
    good = {"system": SYSTEM, "chat": "USER: Hi\n\n\nASSISTANT: Hello! <|endoftext|>\n"}
    bad = {"conversations": [{"from": "human", "value": "x"}, {"from": "function_call", "value": "{not json"}], "tools": "[]"}
    with pytest.raises(DataError, match=r"glaive\.jsonl:2: field 'conversations\[1\]'"):
        read_source("glaive", _file(tmp_path, good, bad))
    with pytest.raises(DataError, match=r"glaive\.jsonl:1: field 'chat'"):
        read_source("glaive", _file(tmp_path, {"text": "neither layout"}))
    with pytest.raises(DataError, match=r"glaive\.jsonl:1"):
        read_source("glaive", _file(tmp_path, '{"chat": '))
