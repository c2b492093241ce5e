from data.tools import normalize_schema, tool_from_doc


def test_bfcl_types_map_to_json_schema_and_keep_original():
    s = normalize_schema({
        "type": "dict",
        "properties": {
            "a": {"type": "float"},
            "b": {"type": "tuple", "items": {"type": "String"}},
            "c": {"type": "any"},
            "d": {"type": "string", "enum": ["x"]},
            "e": {"type": "HashMap", "properties": {"k": {"type": "Boolean"}}},
        },
    })
    assert s["type"] == "object" and s["x-original-type"] == "dict"
    p = s["properties"]
    assert p["a"] == {"type": "number", "x-original-type": "float"}
    assert p["b"]["type"] == "array" and p["b"]["items"] == {"type": "string", "x-original-type": "String"}
    assert p["c"] == {"x-original-type": "any"}  # any: no type constraint
    assert p["d"] == {"type": "string", "enum": ["x"]}  # already JSON Schema: untouched
    assert p["e"]["type"] == "object" and p["e"]["properties"]["k"]["type"] == "boolean"


def test_openai_and_xlam_docs():
    t = tool_from_doc({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}})
    assert t.name == "f" and t.original["type"] == "function"
    x = tool_from_doc({"name": "g", "description": "d", "parameters": {"q": {"type": "str", "default": "a"}}})
    assert x.parameters == {"type": "object", "properties": {"q": {"type": "string", "x-original-type": "str", "default": "a"}}}


def test_xlam_parameter_named_type_is_a_parameter():
    x = tool_from_doc({"name": "g", "parameters": {"type": {"type": "str", "description": "kind"}, "q": {"type": "int"}}})
    assert set(x.parameters["properties"]) == {"type", "q"} and x.parameters["type"] == "object"
