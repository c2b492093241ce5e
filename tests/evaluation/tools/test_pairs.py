"""Training pairs: hard negatives are near misses but never a needed tool; the held-out split is fixed."""

from evaluation.tools.data import Benchmark, Query, in_fraction
from evaluation.tools.pairs import NegativeMiner, _fold, _pairs_of, training_asks
from serving.tools.cards import ToolCard, search_text
from serving.tools.catalog import Catalog
from training.tool_retriever import Pair, TrainDataConfig

CARDS = [ToolCard(name="get_weather", description="weather forecast for a city"),
         ToolCard(name="get_weather~2", description="weather forecast for a city and a date"),
         ToolCard(name="get_weather_alerts", description="storm and weather alerts for a city"),
         ToolCard(name="convert_currency", description="convert an amount between currencies")]


def test_hard_negative_is_the_best_bm25_match_that_is_not_needed_nor_a_variant():
    miner = NegativeMiner(CARDS)
    neg = miner.hard_negative("weather forecast for Paris", {"get_weather"})
    assert neg == search_text(CARDS[2])  # get_weather~2 is the same function in another schema: not a negative
    assert miner.hard_negative("zzz qqq", {"get_weather"}) is None  # no word BM25 knows


def test_pairs_of_a_multi_call_query_pair_each_ask_with_its_call():
    bench = Benchmark("t", Catalog(CARDS), [])
    q = Query("t:1", "What is the weather forecast for Paris tomorrow? Also convert 100 usd to eur please.",
              ["get_weather", "convert_currency"], 2, "t", "train")
    pairs = _pairs_of(bench, [q], "t", TrainDataConfig())
    assert [p.query for p in pairs] == [q.text, q.text, "What is the weather forecast for Paris tomorrow?",
                                        "Also convert 100 usd to eur please."]
    assert [p.positive for p in pairs] == [search_text(CARDS[0]), search_text(CARDS[3])] * 2
    assert all(p.negative not in (search_text(CARDS[0]), search_text(CARDS[1]), search_text(CARDS[3]))
               for p in pairs)
    assert len(_pairs_of(bench, [q], "t", TrainDataConfig(ask_pairs=False, hard_negatives=False))) == 2


def test_the_held_out_split_is_a_fixed_function_of_the_id():
    ids = [f"bfcl_v4:live_simple_{i}" for i in range(2000)]
    picked = [i for i in ids if in_fraction(i, 0.5)]
    assert picked == [i for i in ids if in_fraction(i, 0.5)]  # deterministic
    assert 900 < len(picked) < 1100 and not any(in_fraction(i, 0.0) for i in ids)
    assert {i for i in ids if in_fraction(i, 0.1)} <= set(picked)  # a smaller fraction is a subset


def test_training_asks_are_the_split_asks_not_already_queries_nor_evaluated():
    multi = "Find the area of a rectangle with length 7. Also, calculate the area of a circle with radius 5."
    evaluated = "Tell me the weather in Paris tomorrow please."
    pairs = [Pair(multi, "area", None, "t"), Pair(multi, "circle", None, "t"),
             Pair("Find the area of a rectangle with length 7.", "area", None, "t"),  # an ask already a pair query
             Pair("convert 100 usd to eur", "fx", None, "t"),
             Pair(f"Book a table for two at eight. {evaluated}", "book", None, "t")]
    asks = training_asks(pairs, 6, {_fold(evaluated)})
    assert asks == ["Also, calculate the area of a circle with radius 5.", "Book a table for two at eight."]
    assert training_asks(pairs, 1, set()) == []  # one ask per request: nothing is embedded on its own
