"""prior_gap: the router's λ rows against the category prior, paired on the same held-out queries."""

import pandas as pd

from data.schema import Example, Expected, Label, Message, Tool, write_examples, write_labels
from evaluation.prior_gap import prior_gap


def _run(tmp_path, router_knows_category: bool):
    examples, labels, oof = [], [], []
    for i in range(90):
        cat = "easy" if i % 2 else "hard"
        eid = f"t:{i}"
        examples.append(Example(id=eid, source="t", category=cat, messages=[Message(role="user", content=f"q {i}")],
                                tools=[Tool(name="f")], expected=Expected.nothing()))
        small_ok = cat == "easy"  # the small model is right exactly on the easy category; the big one everywhere
        labels += [Label(example_id=eid, model="big", correct=True, reason="ok", cost_usd=0.01),
                   Label(example_id=eid, model="small", correct=small_ok, reason="ok", cost_usd=0.001)]
        p_small = (0.99 if cat == "easy" else 0.01) if router_knows_category else 0.5
        oof += [{"example_id": eid, "fold": i % 3, "model": "big", "prob": 0.99},
                {"example_id": eid, "fold": i % 3, "model": "small", "prob": p_small}]
    write_examples(tmp_path / "examples.parquet", examples)
    write_labels(tmp_path / "labels.parquet", labels)
    pd.DataFrame(oof).to_parquet(tmp_path / "oof_predictions.parquet")
    return tmp_path


def test_a_router_that_knows_the_category_reaches_the_prior_and_one_that_does_not_costs_more(tmp_path):
    (tmp_path / "knows").mkdir()
    (tmp_path / "blind").mkdir()
    knows = {r["target"]: r for r in prior_gap(_run(tmp_path / "knows", True))}
    blind = {r["target"]: r for r in prior_gap(_run(tmp_path / "blind", False))}
    assert set(knows) == {"best-single accuracy", "≤ 10% of best-single cost"}
    row = knows["best-single accuracy"]
    assert row["reached"] and row["Δ accuracy"].startswith("+0.000") and row["Δ $/M"].startswith("+0 ")
    # Blind to the category it sends every query to the big model: dearer than the prior, which sends the easy
    # half to the small one.
    assert blind["best-single accuracy"]["router"].endswith("at $10,000/M")
    assert blind["best-single accuracy"]["category prior"].endswith("at $5,500/M")
    assert not blind["best-single accuracy"]["reached"]


def test_the_inner_fold_weight_is_applied_from_the_stored_parts(tmp_path):
    """With oof_parts.npz: the fixed blend (weight 0.5) and the inner-fold choice are rows too; here the head and
    lexical parts know nothing and the category branch knows the category, so every fold chooses weight 1."""
    import numpy as np

    run = _run(tmp_path, router_knows_category=False)
    oof = pd.read_parquet(run / "oof_predictions.parquet")
    ids = list(dict.fromkeys(oof.example_id))
    easy = np.array([int(e.split(":")[1]) % 2 == 1 for e in ids])
    cat = np.c_[np.full(len(ids), 4.6), np.where(easy, 4.6, -4.6)]  # big always right; small right on easy
    oof["correct"] = [bool(m == "big" or int(e.split(":")[1]) % 2 == 1) for e, m in zip(oof.example_id, oof.model)]
    # The run's own router is the fixed blend of these parts: sigmoid(0.5 · 0 + 0.5 · cat).
    pos = {e: i for i, e in enumerate(ids)}
    oof["prob"] = [1 / (1 + np.exp(-0.5 * cat[pos[e], 0 if m == "big" else 1])) for e, m in zip(oof.example_id, oof.model)]
    oof.to_parquet(run / "oof_predictions.parquet")
    np.savez(run / "oof_parts.npz", example_ids=np.array(ids), fold=np.array([int(e.split(":")[1]) % 3 for e in ids]),
             models=np.array(["big", "small"]), head=np.zeros_like(cat), lexical=np.zeros_like(cat), category=cat)
    rows = prior_gap(run, weights=[0.0, 0.5, 1.0], cs=[1.0])
    assert [r["variant"] for r in rows[:2]] == ["router (= fixed: weight 0.5, C 1)", "inner-fold choice"]
    assert [c["weight"] for c in rows[0]["choices"]] == [1.0, 1.0, 1.0]
    inner = rows[1]
    assert inner["target"] == "best-single accuracy" and inner["reached"]
    assert inner["Δ accuracy"].startswith("+0.000") and "vs fixed: Δ accuracy" in inner


def _routing(n: int = 120, seed: int = 0):
    """Two models, three folds; the small one is right exactly on the 'easy' rows. The category part knows
    which rows are easy, the head does not."""
    import numpy as np

    from evaluation.routing_eval import RoutingData

    easy = np.arange(n) % 2 == 1
    correct = np.c_[np.ones(n, bool), easy]
    cost = np.c_[np.full(n, 0.01), np.full(n, 0.001)]
    data = RoutingData(example_ids=[f"e{i}" for i in range(n)], models=["big", "small"], correct=correct,
                       cost=cost, folds=np.arange(n) % 3, categories=np.where(easy, "easy", "hard"))
    base = np.c_[np.full(n, 4.0), np.zeros(n)]  # the head: big always right, small a coin
    category = np.c_[np.full(n, 4.0), np.where(easy, 4.0, -4.0)]
    return data, base, category


def test_the_aligned_weight_is_chosen_by_the_target_on_training_rows():
    from dataclasses import replace

    import numpy as np

    from evaluation.prior_gap import aligned_choice

    data, base, category = _routing()
    choice, picks = aligned_choice(base, category, data, "match_best")
    # Only a weight that lets the category part speak (> 0) sends the easy rows to the small model at full
    # accuracy; the head alone (weight 0) cannot tell them apart.
    assert all(w > 0 for w, _ in picks.values())
    assert data.correct[np.arange(len(choice)), choice].all()
    assert (choice == 1).sum() == (data.categories == "easy").sum()
    # A test fold's labels never choose its weight or λ: make the small model wrong on all of fold 0 — the
    # other folds' choices now keep it off (on their training rows it fails), fold 0's stays the same.
    broken = data.correct.copy()
    broken[data.folds == 0, 1] = False
    _, picks_b = aligned_choice(base, category, replace(data, correct=broken), "match_best")
    assert picks_b[0] == picks[0]
    assert picks_b[1] != picks[1] and picks_b[2] != picks[2]
