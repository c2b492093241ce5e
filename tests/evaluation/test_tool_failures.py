"""The failure classes of multi-tool requests (evaluation/tool_failures.py)."""

from evaluation.tool_failures import classify_miss


def test_classes_in_order_primary_first():
    long = "Look up the current weather forecast for a city by its name and date"
    assert classify_miss(12, asks=1, needed=2, sibling_shown=True, bm25_hit=False, description="x") == [
        "not_split", "sibling_shown", "no_word_overlap", "short_description"]
    assert classify_miss(12, 2, 2, False, True, long) == ["near"]
    assert classify_miss(21, 2, 2, False, True, long) == ["far"]
    assert classify_miss(40, 3, 2, False, False, long) == ["no_word_overlap"]
    assert classify_miss(40, 3, 2, False, True, "Get weather") == ["short_description"]
