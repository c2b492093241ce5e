"""calls_agree: two answers mean the same calls (the verifier both ways), or both make none."""

import pytest

from data.schema import Call, Tool
from data.verify.agree import calls_agree, effective_calls

TOOLS = [
    Tool(name="get_weather", parameters={"type": "object", "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
        "days": {"type": "integer"},
    }, "required": ["city"]}),
    Tool(name="math.factorial", parameters={"type": "object", "properties": {"n": {"type": "integer"}}}),
]


def c(name, **args):
    return Call(name=name, arguments=args)


def test_same_call_agrees_and_numbers_compare_by_value():
    assert calls_agree(TOOLS, [c("get_weather", city="Paris", days=3)], [c("get_weather", city="Paris", days=3.0)])


def test_string_canonical_forms_agree():
    assert calls_agree(TOOLS, [c("get_weather", city="paris")], [c("get_weather", city="Paris")])


def test_different_value_disagrees():
    assert not calls_agree(TOOLS, [c("get_weather", city="Paris")], [c("get_weather", city="Rome")])


def test_documented_default_spelled_out_agrees_other_value_does_not():
    assert calls_agree(TOOLS, [c("get_weather", city="Paris", unit="c")], [c("get_weather", city="Paris")])
    assert not calls_agree(TOOLS, [c("get_weather", city="Paris", unit="f")], [c("get_weather", city="Paris")])


def test_parallel_calls_agree_in_any_order_and_count_matters():
    a = [c("get_weather", city="Paris"), c("get_weather", city="Rome")]
    assert calls_agree(TOOLS, a, list(reversed(a)))
    assert not calls_agree(TOOLS, a, a[:1])


def test_native_name_spelling_agrees():
    assert calls_agree(TOOLS, [c("math_factorial", n=5)], [c("math.factorial", n=5)])


def test_no_call_agrees_with_no_call_only():
    assert calls_agree(TOOLS, [], None)
    assert not calls_agree(TOOLS, [], [c("math.factorial", n=5)])
    assert not calls_agree(TOOLS, [c("math.factorial", n=5)], None)


def test_dict_calls_accepted():
    assert calls_agree(TOOLS, [{"name": "math.factorial", "arguments": {"n": 5}}], [c("math.factorial", n=5)])


def test_effective_calls_native_text_is_no_call():
    assert effective_calls([c("math.factorial", n=5)], None, native_text=True) == []
    assert effective_calls(None, "free text") == []
    assert effective_calls([c("math.factorial", n=5)], None) == [c("math.factorial", n=5)]


def test_the_kind_of_a_disagreement_from_the_first_answers_side():
    from data.verify.agree import disagreement_kind

    paris, rome = c("get_weather", city="Paris"), c("get_weather", city="Rome")
    assert disagreement_kind(TOOLS, [], [paris]) == "first_declines"
    assert disagreement_kind(TOOLS, [paris], None) == "second_declines"
    assert disagreement_kind(TOOLS, [paris, rome], [paris]) == "count"
    assert disagreement_kind(TOOLS, [paris], [c("math.factorial", n=3)]) == "functions"
    assert disagreement_kind(TOOLS, [paris], [rome]) == "arguments"
    # A spelling of the same tool is the same function: the difference is in the arguments.
    assert disagreement_kind(TOOLS, [c("math_factorial", n=3)], [c("math.factorial", n=4)]) == "arguments"
    with pytest.raises(ValueError, match="both make no call"):
        disagreement_kind(TOOLS, [], [])


OPTIONAL = [Tool(name="f", parameters={"type": "object", "properties": {
    "n": {"type": "integer"},
    "s": {"type": "string"},
    "xs": {"type": "array", "items": {"type": "integer"}},
}, "required": ["n"]})]


@pytest.mark.parametrize("spelled, left_out", [
    ([c("f", n=1, s="")], [c("f", n=1)]),  # an empty string where the other leaves the argument out
    ([c("f", n=1, xs=[])], [c("f", n=1)]),  # an empty list where the other leaves it out
])
def test_agreement_is_checked_both_ways_whichever_side_comes_first(spelled, left_out):
    from data.verify.agree import _one_way

    # The verifier's two directions differ on these pairs (an argument with no documented default)...
    assert _one_way(OPTIONAL, left_out, spelled, "python") != _one_way(OPTIONAL, spelled, left_out, "python")
    # ...so one direction alone, either one, would call one of the two orders an agreement.
    assert not calls_agree(OPTIONAL, spelled, left_out, language="python")
    assert not calls_agree(OPTIONAL, left_out, spelled, language="python")
    assert calls_agree(OPTIONAL, spelled, spelled, language="python")


def test_the_functions_called_are_compared_as_a_multiset():
    from data.verify.agree import disagreement_kind

    paris, rome, five = c("get_weather", city="Paris"), c("get_weather", city="Rome"), c("math.factorial", n=5)
    # The same set of functions, {get_weather, math.factorial}, called a different number of times each.
    assert disagreement_kind(TOOLS, [paris, rome, five], [paris, five, five]) == "functions"
    assert disagreement_kind(TOOLS, [paris, five, five], [paris, rome, five]) == "functions"
    assert disagreement_kind(TOOLS, [paris, rome, five], [five, rome, rome]) == "arguments"
