"""Unit cases for value-level rules: canonical strings, numbers, arrays, objects,
documented defaults, Java/JavaScript encodings. Each rule has a case that
passes only with the rule and a case showing its limit.

    .venv/bin/python -m pytest -q tests/data/verify/test_values.py
"""

from __future__ import annotations

import pytest

from data.verify.canon import arithmetic_value, canon_string, expressions_equal, parse_instant
from data.verify.defaults import NO_DEFAULT, documented_default
from data.verify.encoded import UNREADABLE, decode_encoded
from data.verify.values import mark_positional, mismatch

S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def same(a: str, b: str) -> bool:
    return mismatch(a, b, S) is None


# --- strings -------------------------------------------------------------------


def test_case_and_whitespace_do_not_matter():
    assert same("  New   York ", "new york")
    assert not same("New York", "New Jersey")


def test_trivial_punctuation_and_quotes_do_not_matter_but_decimal_points_do():
    assert same("San Francisco, CA.", "San Francisco CA")
    assert same("U.S.", "US")
    assert same("Let's go!", "Lets go")
    assert not same("1.5", "15")
    assert not same("3,000", "3 000")


def test_word_separators_and_markdown_escapes():
    assert same("engine_size", "engine size")
    assert same("gluten-free", "Gluten free")
    assert same("JDBC\\_session", "JDBC_session")
    assert not same("-5", "5")


def test_markdown_bold_around_the_whole_value_is_emphasis():
    assert same("**Logistic regression is not present in the text.**", "Logistic regression is not present in the text.")
    assert not same("**a** and **b**", "a and b")  # bold pieces inside a value are kept
    assert not same("2**3", "23")


def test_spaces_around_angle_brackets_do_not_matter():
    assert same("echo. > C:\\testing.txt", "echo.>C:\\testing.txt")
    assert same("x > 5", "x>5")
    assert not same("Ha Noi", "Hanoi")  # other spacing still counts


def test_iso_dates_and_datetimes_compare_as_instants():
    assert same("2024-03-05T10:00:00+02:00", "2024-03-05 08:00:00Z")
    assert same("2024-03-05T08:00:00Z", "2024-03-05T08:00:00+00:00")
    assert not same("2024-03-05T08:00:00Z", "2024-03-05T09:00:00Z")
    assert not same("2024-03-05", "2024-03-05T00:00:00")  # a date is not a datetime
    assert not same("2024-03-05T08:00:00", "2024-03-05T08:00:00Z")  # naive is not aware
    assert parse_instant("2024-13-40") is None


def test_us_states_names_equal_codes_also_inside_longer_strings():
    assert same("Chicago, IL", "Chicago, Illinois")
    assert same("Charleston, West Virginia", "charleston wv")
    assert same("TX", "Texas")
    assert not same("Chicago, IL", "Chicago, Indiana")
    # Codes are never expanded: "in" stays a word.
    assert canon_string("Made in USA") == "made in usa"


def test_math_expressions_compare_by_syntax_tree():
    assert expressions_equal("x^2", "x**2")
    assert expressions_equal("2x**2", "lambda x: 2*x**2")
    assert expressions_equal("y=x^3", "x**3")
    assert expressions_equal("lambda t: 3*t**2", "lambda x: 3*x**2")
    assert not expressions_equal("x*3", "x**3")
    assert same("y=x^2", "lambda x: x**2")
    assert not expressions_equal("New York", "New York")  # not an expression


# --- numbers and types ----------------------------------------------------------


def test_numbers_compare_by_value_one_equals_one_point_zero():
    assert mismatch(1, 1.0, N) is None
    assert mismatch(1.0, 1, I) is None
    assert mismatch(0.1 + 0.2, 0.3, N) is None
    assert mismatch(2, 3, N) == "value_error:number"


def test_numeric_types_follow_the_schema():
    assert mismatch("ten", 10, I) == "type_error:integer"
    assert mismatch("10", 10, N) == "type_error:number"
    assert mismatch(True, 1, I) == "type_error:integer"
    assert mismatch("true", True, B) == "type_error:boolean"
    assert mismatch(5, "5", S) == "type_error:string"


def test_arithmetic_of_literals_counts_as_its_value():
    assert arithmetic_value("500 * 500") == 250000
    assert mismatch("3 / 100", 0.03, N) is None
    assert mismatch(250000, "500 * 500", N) is None  # answer kept as source text
    assert arithmetic_value("2 ** 1000") is None  # bounded
    assert mismatch("x / 100", 0.03, N) == "type_error:number"


def test_answer_that_contradicts_its_schema_is_compared_by_its_own_kind():
    # items says integer, but the answer is a nested table
    schema = {"type": "array", "items": {"type": "integer"}}
    assert mismatch([[10, 20], [30, 40]], [[10, 20], [30, 40]], schema) is None
    # an array parameter whose answer is an expression string
    assert mismatch("data['sales']", "data['sales']", {"type": "array"}) is None


# --- arrays ----------------------------------------------------------------------

ARR = {"type": "array", "items": {"type": "number"}}


def test_arrays_are_multisets_order_insensitive():
    assert mismatch([3, 1, 2], [1, 2, 3], ARR) is None
    assert mismatch([1, 3], [1.0, 3.0], ARR) is None


def test_array_duplicates_count():
    assert mismatch([1, 1, 2], [1, 2, 2], ARR) == "value_error:array"
    assert mismatch([1, 2], [1, 2, 2], ARR) == "value_error:array"


def test_arrays_compare_recursively_with_canonical_strings():
    schema = {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
    assert mismatch([["b", "A"], ["c"]], [["C"], ["a", "B"]], schema) is None
    assert mismatch([["b", "A"], ["c"]], [["d"], ["a", "b"]], schema) == "value_error:array"


def test_tuples_keep_their_order():
    tup = {"type": "array", "x-original-type": "tuple", "items": {"type": "number"}}
    assert mismatch([40.7, -74.0], [40.7, -74.0], tup) is None
    assert mismatch([-74.0, 40.7], [40.7, -74.0], tup) == "value_error:array"


# --- objects -----------------------------------------------------------------------

OBJ = {
    "type": "object",
    "properties": {"min": {"type": "number"}, "max": {"type": "number"}, "unit": {"type": "string"}},
}


def test_objects_compare_recursively():
    assert mismatch({"min": 1, "max": 2.0}, {"max": 2, "min": 1.0}, OBJ) is None
    assert mismatch({"min": 1, "max": 3}, {"min": 1, "max": 2}, OBJ) == "value_error:object"
    assert mismatch({"min": 1}, {"min": 1, "max": 2}, OBJ) == "value_error:object"


def test_bfcl_nested_form_lists_acceptable_values_and_optional_keys():
    nested = {"min": [1, 1.5], "max": [2], "unit": ["", "usd"]}
    assert mismatch({"min": 1.5, "max": 2}, nested, OBJ) is None
    assert mismatch({"min": 1, "max": 2, "unit": "USD"}, nested, OBJ) is None
    assert mismatch({"min": 3, "max": 2}, nested, OBJ) == "value_error:object"
    assert mismatch({"min": 1}, nested, OBJ) == "value_error:object"  # max not optional
    # An empty value for a key that may be omitted is the same as leaving it out.
    assert mismatch({"min": 1, "max": 2, "unit": ""}, nested, OBJ) is None
    assert mismatch({"min": 1, "max": 2, "unit": None}, nested, OBJ) is None
    assert mismatch({"min": 1, "max": "", "unit": "usd"}, nested, OBJ) == "value_error:object"  # max not optional


def test_type_errors_for_containers():
    assert mismatch("[1, 2]", [1, 2], ARR) == "type_error:array"
    assert mismatch("{}", {}, OBJ) == "type_error:object"


# --- documented defaults -------------------------------------------------------------


@pytest.mark.parametrize(
    "schema, value",
    [
        ({"type": "string", "description": "Unit. Default is 'metric'."}, "metric"),
        ({"type": "boolean", "description": "Defaults to false"}, False),
        ({"type": "integer", "description": "The default value is 10"}, 10),
        ({"type": "string", "description": "Language. Default is English."}, "English"),
        ({"type": "string", "description": "Scope. Default is all if not specified"}, "all"),
        ({"type": "array", "description": "Filters. Default empty array"}, []),
        ({"type": "boolean", "default": "false"}, False),
        ({"type": "number", "default": 0.5, "description": "Default is 9"}, 0.5),
    ],
)
def test_documented_defaults(schema, value):
    assert documented_default(schema) == value


@pytest.mark.parametrize("desc", ["Default is the current year", "The year.", "default level is set to 50%"])
def test_no_default_unless_unambiguous(desc):
    assert documented_default({"type": "integer", "description": desc}) is NO_DEFAULT


# --- Java / JavaScript ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, type_, value",
    [
        ("true", "boolean", True),
        ("50L", "integer", 50),
        ("3.5f", "number", 3.5),
        ('"abc"', "string", "abc"),
        ("[1, 2]", "array", [1, 2]),
        ('Arrays.asList("a", "b")', "array", ["a", "b"]),
        ("new ArrayList<>(Arrays.asList(1, 2))", "array", [1, 2]),
        ('new String[]{"a", "b"}', "array", ["a", "b"]),
        ("{limit=50, schemaFilter=public}", "object", {"limit": 50, "schemaFilter": "public"}),
        ("{limit: 50, schemaFilter: 'public'}", "object", {"limit": 50, "schemaFilter": "public"}),
        ('Map.of("limit", 50)', "object", {"limit": 50}),
        ('new HashMap<>() {{ put("limit", 50); }}', "object", {"limit": 50}),
    ],
)
def test_encoded_values_read_as_their_schema_type(text, type_, value):
    assert decode_encoded(text, type_) == value


def test_encoded_mode_only_applies_to_java_and_javascript():
    hashmap = {"type": "object", "x-original-type": "HashMap"}
    assert mismatch("{limit=50}", {"limit": 50}, hashmap, encoded=True) is None
    assert mismatch("{limit=50}", {"limit": 50}, hashmap, encoded=False) == "type_error:object"
    assert mismatch("yes", True, B, encoded=True) == "type_error:encoded"
    assert decode_encoded("maybe", "boolean") is UNREADABLE


def test_encoded_variable_names_and_null():
    # A Java variable is a valid value of any type: compared as text with the answer.
    assert mismatch("durations", "durations", {"type": "object"}, encoded=True) is None
    assert mismatch(None, "null", None, encoded=True) is None
    assert mismatch(None, "null", None, encoded=False) == "value_error:other"


def test_arrays_with_a_documented_positional_format_keep_their_order():
    point = mark_positional(
        {"type": "array", "items": {"type": "number"}, "description": "x and y coordinates, in percent."}
    )
    assert mismatch([0.6, 0.3], [0.6, 0.3], point) is None
    assert mismatch([0.3, 0.6], [0.6, 0.3], point) == "value_error:array"
    tags = mark_positional(
        {"type": "array", "items": {"type": "string"}, "description": "Price range in format ['low', 'mid']."}
    )
    assert mismatch(["mid", "low"], ["low", "mid"], tags) is None
    nested = mark_positional(
        {
            "type": "array",
            "description": "Vertices.",
            "items": {"type": "array", "description": "A vertex [x, y]."},
        }
    )
    assert mismatch([[2, 1], [3, 4]], [[3, 4], [1, 2]], nested) == "value_error:array"
    assert mismatch([[1, 2], [3, 4]], [[3, 4], [1, 2]], nested) is None


@pytest.mark.parametrize("text, type_", [("{{'a': 1}}", "object"), ("{{'a': 1}, {'b': 2}}", "array")])
def test_a_literal_python_cannot_build_is_unreadable_not_a_crash(text, type_):
    """A set of dicts (seen in a recorded open-weight answer): TypeError inside literal_eval."""
    assert decode_encoded(text, type_) is UNREADABLE
