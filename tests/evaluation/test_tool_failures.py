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


def test_sibling_fill_puts_the_best_cards_namespace_siblings_next():
    import numpy as np

    from evaluation.tool_failures import sibling_fill

    fused = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0])
    spaces = ["a", "b", "", "c", "c", "a", "b"]
    # head 2 (cards 0 "a", 1 "b"); siblings 5 ("a"), 6 ("b") next, best first; then the rest by score
    assert sibling_fill(fused, spaces, head=2, k=5) == [0, 1, 5, 6, 2]
    assert sibling_fill(fused, spaces, head=2, k=3) == [0, 1, 5]


def test_round_robin_takes_each_list_in_turn_without_repeats():
    from evaluation.tool_failures import round_robin

    assert round_robin([[1, 2, 3], [4, 1, 5], [6]], k=5) == [1, 4, 6, 2, 3]
    assert round_robin([[1], []], k=3) == [1]
