"""category_hard: the category branch with the most probable category's rates, against the soft one and the prior."""

import numpy as np
import pytest
from scipy import sparse

from evaluation.category_hard import branch_logits, compare
from tests.evaluation.test_prior_gap import _run
from training.category import CategoryModel

RATES = np.array([[0.9, 0.2], [0.5, 0.8]])  # two categories × two models
PROBS = np.array([[0.7, 0.3], [0.4, 0.6], [0.95, 0.05]])


def _logit(p):
    return np.log(p / (1 - p))


def test_soft_is_the_mixture_and_hard_is_the_top_categorys_rates():
    np.testing.assert_allclose(branch_logits(PROBS, RATES), _logit(PROBS @ RATES))
    np.testing.assert_allclose(branch_logits(PROBS, RATES, 0.0), _logit(RATES[[0, 1, 0]]))


def test_the_threshold_keeps_the_soft_mixture_where_the_guess_is_unsure():
    z = branch_logits(PROBS, RATES, 0.8)  # only the third row's top probability (0.95) reaches 0.8
    np.testing.assert_allclose(z[:2], _logit(PROBS[:2] @ RATES))
    np.testing.assert_allclose(z[2], _logit(RATES[0]))


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="do not match"):
        branch_logits(PROBS, RATES.T[:1])


def test_the_soft_branch_is_the_shipped_one():
    """The soft logits from the classifier's probabilities are CategoryModel.logits: the baseline measured is the
    shipped branch."""
    rng = np.random.default_rng(0)
    x = sparse.csr_matrix(rng.random((40, 6)))
    meta = rng.normal(size=(40, 2))
    cats = ["a" if v > 0 else "b" for v in meta[:, 0]]
    y, mask = rng.random((40, 3)) > 0.4, np.ones((40, 3), bool)
    cat = CategoryModel.fit(x, meta, cats, y, mask)
    np.testing.assert_allclose(branch_logits(cat.category_probs(x, meta), cat.rates), cat.logits(x, meta), atol=1e-12)


def test_a_right_hard_guess_alone_is_the_category_prior(tmp_path):
    """Every category guessed right with the true categories' rates: `hard alone` routes as the prior does (Δ 0,
    reached); the soft mixture of a 0.7-sure guess is a different router."""
    run = _run(tmp_path, router_knows_category=False)
    ids = [f"t:{i}" for i in range(90)]
    easy = np.array([i % 2 == 1 for i in range(90)])
    rates = np.array([[0.99, 0.99], [0.99, 0.01]])  # easy: both right; hard: only "big"
    probs = np.where(easy[:, None], [0.7, 0.3], [0.3, 0.7])
    br = {"example_ids": np.array(ids), "models": np.array(["big", "small"]), "fold": np.arange(90) % 3,
          "base": np.zeros((90, 2)), "soft": branch_logits(probs, rates), "hard": branch_logits(probs, rates, 0.0),
          "hard_thr": branch_logits(probs, rates, 0.8)}
    rows = {(r["target"], r["router"]): r for r in compare(run, br)}
    alone = rows[("best-single accuracy", "hard alone")]
    assert alone["reached"] and alone["Δ vs prior: acc."].startswith("+0.000") and alone["Δ vs prior: $/M"].startswith("+0 ")
    assert alone["$/M"] == "5,500"  # the easy half to the small model ($1,000/M), the hard half to the big one
    shipped = rows[("best-single accuracy", "shipped (soft, weight 0.5)")]
    assert shipped["Δ vs shipped: acc."].startswith("+0.000") and shipped["Δ vs shipped: $/M"] == "+0 [+0, +0]"
    # With no row at P ≥ 0.8 the thresholded branch is the soft one.
    np.testing.assert_allclose(br["hard_thr"], br["soft"])
