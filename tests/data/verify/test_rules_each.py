"""One case for each verifier rule whose deletion no other test noticed.

    .venv/bin/python -m pytest -q tests/data/verify/test_rules_each.py

Each test asserts the rule's verdict and its contrast (the same output without
the rule's condition fails), so deleting the rule fails the test.
"""

from __future__ import annotations

from tests.data.verify.helpers import WEATHER, call, check, fn


def test_out_of_domain_is_a_declined_call_where_no_call_is_expected():
    assert check(WEATHER, [], [call("out_of_domain", user_query="book me a flight")]).correct
    assert check(WEATHER, [], [call("weather.get", city="Paris")]).reason == "no_call_expected"
    # A real tool of that name is a call like any other.
    assert check([WEATHER, fn("out_of_domain", {"user_query": {"type": "string"}})], [],
                 [call("out_of_domain", user_query="x")]).reason == "no_call_expected"


def test_an_empty_value_for_a_parameter_the_answer_leaves_out_means_not_given():
    gt = [{"weather.get": {"city": ["Paris"]}}]
    for empty in ("", None, [], {}):
        assert check(WEATHER, gt, [call("weather.get", city="Paris", unit=empty)]).correct, empty
    assert check(WEATHER, gt, [call("weather.get", city="Paris", unit="kelvin")]).reason == "unexpected_param"


def test_an_empty_value_for_an_optional_parameter_is_the_same_as_leaving_it_out():
    gt = [{"weather.get": {"city": ["Paris"], "days": ["", 3]}}]  # "" in the answer: days may be omitted
    for empty in ("", None):
        assert check(WEATHER, gt, [call("weather.get", city="Paris", days=empty)]).correct, empty
    assert check(WEATHER, gt, [call("weather.get", city="Paris", days=3)]).correct
    assert not check(WEATHER, [{"weather.get": {"city": ["Paris"], "days": [3]}}],
                     [call("weather.get", city="Paris", days="")]).correct  # not optional: empty is a value


def test_an_answer_naming_a_tool_by_its_short_name():
    tool = fn("restaurant_search.find_closest", {"cuisine": {"type": "string"}})
    gt = [{"find_closest": {"cuisine": ["thai"]}}]  # BFCL's answer shortens the dotted name
    assert check(tool, gt, [call("restaurant_search.find_closest", cuisine="thai")]).correct
    two = [tool, fn("hotel_search.find_closest", {"cuisine": {"type": "string"}})]
    assert not check(two, gt, [call("restaurant_search.find_closest", cuisine="thai")]).correct  # ambiguous: no guess


def test_a_javascript_typed_value_matches_an_answer_kept_as_source_text():
    tool = fn("setTimer", {"delay": {"type": "any"}, "repeat": {"type": "any"}})
    gt = [{"setTimer": {"delay": ["50"], "repeat": ["true"]}}]
    assert check(tool, gt, [call("setTimer", delay=50, repeat=True)], language="javascript").correct
    assert not check(tool, gt, [call("setTimer", delay=51, repeat=True)], language="javascript").correct
    assert not check(tool, gt, [call("setTimer", delay=50, repeat=True)]).correct  # Python: 50 is not "50"


def test_the_openai_functions_prefix_is_the_tool_itself():
    gt = [{"weather.get": {"city": ["Paris"]}}]
    for name in ("functions.weather_get", "functions.weather.get"):
        assert check(WEATHER, gt, [call(name, city="Paris")]).correct, name
    assert check(WEATHER, gt, [call("tools.weather_get", city="Paris")]).reason == "wrong_function"
