"""Loading tool cards from every supported format, catalog versions, and errors that say where."""

import json

import pytest

from data.errors import DataError
from serving.tools.cards import ToolCard, search_text, split_identifier
from serving.tools.catalog import Catalog
from serving.tools.loaders import load_cards


def test_yaml_cards_and_groups(cards_file):
    cards, groups = load_cards(cards_file)
    assert [c.key for c in cards][:3] == ["payments.get_payment_status", "payments.refund_payment", "payments.charge_card"]
    assert cards[1].risk == "irreversible" and cards[1].permissions == ["payments.refund"]
    assert {g.name for g in groups} == {"payments", "invoices"}
    cat = Catalog(cards, groups)
    # payments/invoices described in the file; weather and ops derived from namespaces
    assert cat.group_names() == ["invoices", "ops", "payments", "weather"]
    assert cat.groups["payments"].description.startswith("use for charging")
    assert cat.groups["ops"].description == "tools in ops"


def test_openai_list_and_mcp_annotations(tmp_path):
    openai = tmp_path / "openai.json"
    openai.write_text(json.dumps([{"type": "function", "function": {
        "name": "get_weather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]))
    (c,), _ = load_cards(openai, default_risk="read")
    assert (c.key, c.risk, c.parameters["properties"]["city"]["type"]) == ("get_weather", "read", "string")

    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object", "properties": {}},
         "annotations": {"readOnlyHint": True}},
        {"name": "write_file", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": False}},
        {"name": "delete_file", "inputSchema": {"type": "object"}, "annotations": {"title": "Delete"}},
        {"name": "plain", "inputSchema": {"type": "object"}},
    ]}}))
    cards, _ = load_cards(mcp)
    assert [c.risk for c in cards] == ["read", "write", "irreversible", "write"]  # no annotations: unknown → write
    assert cards[2].description == "Delete"


def test_bfcl_docs_keep_their_name_and_normalise_types(tmp_path):
    p = tmp_path / "bfcl.jsonl"
    p.write_text(json.dumps({"name": "math.factorial", "description": "n!", "parameters": {
        "type": "dict", "properties": {"n": {"type": "integer"}, "x": {"type": "float"}}, "required": ["n"]}}) + "\n")
    (c,), _ = load_cards(p)
    assert (c.namespace, c.name, c.exposed_name, c.group_name) == ("math", "factorial", "math.factorial", "math")
    assert c.parameters["type"] == "object" and c.parameters["properties"]["x"]["type"] == "number"
    assert c.to_openai()["function"]["name"] == "math.factorial"


def test_bad_card_names_file_line_and_field(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("tools:\n  - {namespace: a, name: ok, risk: read}\n  - namespace: a\n    name: bad\n    risk: dangerous\n")
    with pytest.raises(DataError) as e:
        load_cards(p)
    assert e.value.line == 3 and e.value.field == "tools[1]" and "risk" in str(e.value)
    assert str(p) in str(e.value)


def test_duplicate_keys_across_files_and_reserved_name(tmp_path, cards_file):
    other = tmp_path / "other.yaml"
    other.write_text("tools:\n  - {namespace: payments, name: charge_card, risk: write}\n")
    with pytest.raises(DataError, match="also defined in"):
        Catalog.from_files([cards_file, other])
    cat = Catalog.from_files([cards_file, other], duplicates="rename")
    assert cat.cards[-1].key == "payments.charge_card~2" and len(cat) == 9
    with pytest.raises(DataError, match="reserved"):
        Catalog([ToolCard(name="request_group")])


def test_version_is_a_content_hash(cards_file):
    cards, groups = load_cards(cards_file)
    v1 = Catalog(cards, groups).version
    assert Catalog(list(cards), groups).version == v1
    changed = [cards[0].model_copy(update={"health": "degraded"})] + cards[1:]
    assert Catalog(changed, groups).version != v1


def test_search_text_splits_identifiers_and_skips_when_not():
    assert split_identifier("getStockPrice") == "get stock price"
    assert split_identifier("finance.get_price-v2") == "finance get price v2"
    card = ToolCard(name="refund", namespace="pay", description="Refund", when_not_to_use="partial refunds",
                    parameters={"type": "object", "properties": {"orderId": {"type": "string", "description": "the order"}}})
    text = search_text(card)
    assert "order id the order" in text and "partial" not in text
