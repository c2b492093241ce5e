"""Onboarding with the new model imputed off its probes (evaluation.onboard_impute), on tiny inputs.

    .venv/bin/python -m pytest -q tests/evaluation/test_onboard_impute.py
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.onboard_impute import ARGUMENTS, fit_choice, held_out_imputed, impute, rectified, split_of, stacked
from evaluation.routing_eval import RoutingData
from evaluation.strategies import CascadeData


def cd_of(correct, cost, folds) -> CascadeData:
    """Answers agree exactly when both are right (wrong answers all differ); kinds: 'arguments' where not."""
    correct = np.asarray(correct, bool)
    n, m = correct.shape
    agree = correct[:, :, None] & correct[:, None, :]
    agree[:, range(m), range(m)] = True
    kinds = np.where(agree, 0, ARGUMENTS).astype(np.int8)
    data = RoutingData([f"x:{i}" for i in range(n)], np.array(["c"] * n), [f"m{j}" for j in range(m)], correct,
                       np.tile(np.asarray(cost, float), (n, 1)), np.asarray(folds))
    return CascadeData(data, agree, np.ones((n, m)), {f"m{j}": n for j in range(m)}, kinds)


def test_fit_choice_learns_which_model_the_new_one_answers_like():
    rng = np.random.default_rng(0)
    n, m = 120, 3
    labels = rng.random((n, m)) < 0.6
    declined = np.zeros((n, m), bool)
    agree = labels[:, :, None] & labels[:, None, :]
    agree[:, range(m), range(m)] = True
    # X gives model 2's answer on every probe: it agrees with 2 and whoever agrees with 2.
    x_agrees = agree[:, 2, :]
    model = fit_choice(x_agrees, labels, declined, split_of(agree))
    p = model.probabilities(labels.astype(float), declined.astype(float), split_of(agree))
    wrong_2 = ~labels[:, 2]  # there model 2's answer is its own: X copies it, nobody else
    assert p[wrong_2, 2].mean() > 0.8 and p[wrong_2, m].mean() < 0.1
    assert model.weights[2] > max(model.weights[0], model.weights[1]) + 1.0
    # X agreeing with nobody on every probe: the unique option takes over.
    alone = fit_choice(np.zeros((n, m), bool), labels, declined, split_of(agree))
    assert alone.probabilities(labels.astype(float), declined.astype(float), split_of(agree))[:, m].mean() > 0.9


def test_imputation_copies_the_pool_answers_of_the_model_it_answers_like():
    # Pool m0 right on even rows, m1 right on rows divisible by 3; X (m2) is an exact copy of m1 on its probes.
    n = 60
    r = np.arange(n)
    m1 = r % 3 == 0
    correct = np.stack([r % 2 == 0, m1, m1], axis=1)
    cd = cd_of(correct, [1.0, 5.0, 1.0], r % 2)
    cd.agree[:, 1, 2] = cd.agree[:, 2, 1] = True  # X's answer is m1's, right or wrong
    cd.kinds[:, 1, 2] = cd.kinds[:, 2, 1] = 0
    probe = r < 24
    model = fit_choice(cd.agree[probe, 2, :2], correct[probe, :2], np.zeros((24, 2), bool),
                       split_of(cd.agree[probe][:, :2, :2]))
    rest = r[~probe]
    a_row, k_row, lab, _ = impute(cd, 2, rest, model, correct[:, :2], np.zeros((n, 2), bool), 0.2,
                                  np.random.default_rng(1))
    assert a_row[:, 1].mean() > 0.8 and (lab == correct[rest, 1]).mean() > 0.8
    # The imputation reads the pool's answers on each query: change m1's labels off the probes and X's follow.
    flipped = correct[:, :2].copy()
    flipped[rest, 1] = ~flipped[rest, 1]
    _, _, lab2, _ = impute(cd, 2, rest, model, flipped, np.zeros((n, 2), bool), 0.2, np.random.default_rng(1))
    assert (lab2 == flipped[rest, 1]).mean() > 0.8 and (lab2 != lab).mean() > 0.6


def test_stacked_copies_replace_only_the_imputed_rows_of_the_new_model():
    n = 8
    correct = np.ones((n, 3), bool)
    cd = cd_of(correct, [1.0, 2.0, 3.0], np.arange(n) % 2)
    train, test = np.flatnonzero(np.arange(n) % 2 == 1), np.flatnonzero(np.arange(n) % 2 == 0)
    imp = train[2:]
    a_row = np.zeros((len(imp), 3), bool)
    a_row[:, 2] = True
    k_row = np.full((len(imp), 3), ARGUMENTS, np.int8)
    k_row[:, 2] = 0
    copies = [(imp, a_row, k_row, np.zeros(len(imp), bool), np.full(len(imp), 9.0))] * 2
    big, is_test = stacked(cd, correct, 2, copies, train, test)
    assert len(big.data.example_ids) == 2 * len(train) + len(test) and is_test.sum() == len(test)
    first = big.data.correct[: len(train)]
    assert first[:2, 2].all() and not first[2:, 2].any() and first[:, :2].all()  # probes real, the rest imputed
    assert (big.data.cost[: len(train)][2:, 2] == 9.0).all() and (big.data.cost[is_test, 2] == 3.0).all()
    assert not big.agree[2, 0, 2] and big.agree[2, 2, 0] == big.agree[2, 0, 2] and big.agree[is_test][:, 0, 2].all()


def test_held_out_imputed_uses_the_pool_answers_off_the_probes():
    # m0 cheap and right on half the rows, m1 dear and always right; the new model X (m2) gives m1's answer at
    # 1.5. Within a budget of 2.0 the policy is single(X) when X's imputed rows say it answers like m1 there.
    rng = np.random.default_rng(0)
    n = 200
    folds = np.arange(n) % 2
    m0 = rng.random(n) < 0.5
    correct = np.stack([m0, np.ones(n, bool), np.ones(n, bool)], axis=1)
    cd = cd_of(correct, [1.0, 10.0, 1.5], folds)
    probe = np.zeros(n, bool)
    probe[rng.choice(n, 30, replace=False)] = True
    declined = np.zeros((n, 3), bool)
    kw = dict(probe=probe, new=2, declined=declined, copies=2, rules=(), budgets={0: 2.0, 1: 2.0}, anchor_models=2)
    out = held_out_imputed(cd, correct, pool_labels=correct[:, :2], rng=np.random.default_rng(0), **kw)
    ok, paid = out["cost_fraction"]
    assert ok.all() and np.allclose(paid, 1.5)
    rect = held_out_imputed(cd, correct, pool_labels=correct[:, :2], rng=np.random.default_rng(0), rectify=True, **kw)
    assert np.allclose(rect["cost_fraction"][1], 1.5)
    # The same probes, but the pool's labels off the probes say m1 (whose answers X gives) is wrong there: the
    # imputation follows them and X is no longer worth it (an imputation ignoring the pool would not move).
    bad = correct[:, :2].copy()
    bad[~probe, 1] = False
    out = held_out_imputed(cd, np.c_[bad, correct[:, 2]], pool_labels=bad, rng=np.random.default_rng(0), **kw)
    assert np.allclose(out["cost_fraction"][1], 1.0)
    with pytest.raises(ValueError, match="no probe query"):
        held_out_imputed(cd, correct, pool_labels=correct[:, :2], rng=np.random.default_rng(0),
                         **{**kw, "probe": folds == 0})


def test_rectified_corrects_the_imputation_by_the_probes_residual():
    rng = np.random.default_rng(0)
    truth_all = rng.random((400, 2))
    probe = np.arange(400) < 100
    f_all = np.c_[truth_all[:, 0] + 0.3, rng.random(400)]  # column 0: biased but exact up to a shift; 1: noise
    est = rectified(truth_all[probe], f_all[probe], f_all)  # the default form, "shrink"
    lam0 = 1 / (1 + 100 / 400)  # Cov = Var there
    assert est[0] == pytest.approx(f_all[:, 0].mean() - lam0 * 0.3)  # (1 − λ) × the shift is left: shrinkage
    assert abs(est[1] - f_all[:, 1].mean()) < 0.05  # uncorrelated imputation: (almost) no correction
    same = rectified(f_all[probe], f_all[probe], f_all)  # imputation right on the probes: nothing to correct
    assert np.allclose(same, f_all.mean(0))
    # PPI++: the probes' mean + λ × (imputed mean − imputed probe mean); the shift cancels at any λ
    ppi = rectified(truth_all[probe], f_all[probe], f_all, form="ppi")
    y_p, y_all = truth_all[probe, 0].mean(), truth_all[:, 0].mean()
    assert ppi[0] == pytest.approx(y_p + lam0 * (y_all - y_p))
    assert abs(ppi[1] - truth_all[probe, 1].mean()) < 0.01  # uncorrelated imputation: λ ≈ 0, the probes' mean
    with pytest.raises(ValueError, match="form"):
        rectified(truth_all[probe], f_all[probe], f_all, form="mean")


def test_fit_choice_tells_a_lone_answer_where_the_pool_is_unanimous_apart():
    # X answers unlike everyone on a third of the contested queries and never where the whole pool agrees: the
    # unanimous weight (δ_0) carries that, so the unique option's probability differs between the two.
    rng = np.random.default_rng(3)
    n, m = 300, 4
    unanimous = np.arange(n) < 150
    labels = np.where(unanimous[:, None], True, rng.random((n, m)) < 0.5)
    agree = labels[:, :, None] & labels[:, None, :] | unanimous[:, None, None]
    agree[:, range(m), range(m)] = True
    declined = np.zeros((n, m), bool)
    x_agrees = agree[:, 0, :].copy()
    lone = ~unanimous & (np.arange(n) % 3 == 0)
    x_agrees[lone] = False
    split = split_of(agree)
    model = fit_choice(x_agrees, labels, declined, split, split_terms=True)
    p = model.probabilities(labels.astype(float), declined.astype(float), split)[:, m]
    assert p[unanimous].mean() < 0.25 * p[~unanimous].mean() and p[~unanimous].mean() > 0.15
    assert model.weights[-1] < -1.0  # δ_0
    plain = fit_choice(x_agrees, labels, declined, split)  # the default: β_s and δ_0 stay 0
    assert plain.weights.shape == model.weights.shape and (plain.weights[-2:] == 0).all()


def test_relabelled_lets_the_new_models_imputed_answer_vote():
    # Pool m0, m1, m2, all wrong and all different on a quarter of the rows (no group: m2's pool-consensus label
    # there is false, as copied), right and agreeing elsewhere. X's imputed answer agrees with m2 there: copied,
    # its label is m2's (false); relabelled, X's vote makes {m2, X} the largest group, so X's label is true.
    from evaluation.onboard_impute import relabelled

    n = 40
    r = np.arange(n)
    contested = r % 4 == 1
    correct = np.ones((n, 4), bool)
    correct[contested, :3] = False
    cd = cd_of(correct, [1.0, 1.0, 1.0, 1.0], r % 2)
    rows = np.flatnonzero(contested)  # every contested row is a training row (odd): imputed there
    a_row = np.zeros((len(rows), 4), bool)
    a_row[:, 2] = a_row[:, 3] = True  # X (column 3) answers as m2 there
    k_row = np.where(a_row, 0, ARGUMENTS).astype(np.int8)
    copied = np.zeros(len(rows), bool)
    declined = np.zeros((n, 4), bool)
    probes = np.flatnonzero(~contested & (r % 2 == 1))
    test = np.flatnonzero(r % 2 == 0)
    (d,), extra = relabelled(cd, 3, probes, test, declined, [(rows, a_row, k_row, copied, np.ones(len(rows)))], [])
    assert d[0] is rows and d[3].all() and extra == []
    # X imputed to answer unlike everyone there: alone, as every pool model is, and no better placed.
    alone = np.zeros((len(rows), 4), bool)
    alone[:, 3] = True
    (d2,), _ = relabelled(cd, 3, probes, test, declined, [(rows, alone, k_row, copied, np.ones(len(rows)))], [])
    assert not d2[3].any()


def test_contested_probes_favour_split_queries_and_return_their_inclusion_weights():
    from evaluation.onboard_impute import contested_probes

    m, n, size = 8, 1000, 200
    split = np.r_[np.zeros(500), np.full(500, 0.5)]  # weights 1/8 and 5/8: a split query is 5 times as likely
    hits = np.zeros(n)
    for seed in range(40):
        probe, inv = contested_probes(split, size, m, np.random.default_rng(seed))
        assert probe.sum() == size
        hits += probe
    pi = 1 / inv
    assert pi.sum() == pytest.approx(size)
    assert pi[600] / pi[0] == pytest.approx(5.0)
    assert hits[500:].sum() / hits[:500].sum() == pytest.approx(5.0, rel=0.15)
    # a weight so large that its query is always asked: capped at 1, the rest spread over the others
    capped = 1 / contested_probes(np.r_[50.0, np.zeros(99)], 10, m, np.random.default_rng(0))[1]
    assert capped[0] == 1.0 and capped.sum() == pytest.approx(10)


def test_weighted_rectifier_undoes_an_unequal_probe_design():
    # The imputation is off by +0.4 on one half of the rows and exact on the other; the probes oversample the
    # biased half 4:1. Unweighted, the residual is overstated; weighted by 1/π it is the all-rows residual.
    rng = np.random.default_rng(1)
    n = 2000
    truth = rng.random((n, 1))
    biased = np.arange(n) < n // 2
    f = truth + np.where(biased, 0.4, 0.0)[:, None]
    w = np.where(biased, 4.0, 1.0)
    probe = np.zeros(n, bool)
    probe[rng.choice(n, size=400, replace=False, p=w / w.sum())] = True
    inv = (w / w.sum() * 400) ** -1
    plain = rectified(truth[probe], f[probe], f, form="ppi")[0]
    weighted = rectified(truth[probe], f[probe], f, weights=inv[probe], form="ppi")[0]
    assert abs(weighted - truth.mean()) < 0.03 < abs(plain - truth.mean())
    # The default form shrinks toward the imputation (+0.2 over all rows) by λ < 1 of the residual: weighted,
    # the residual is the all-rows one (−0.2), unweighted the oversampled half's (nearer −0.32), so less is taken off.
    s_plain = rectified(truth[probe], f[probe], f)[0]
    s_weighted = rectified(truth[probe], f[probe], f, weights=inv[probe])[0]
    assert truth.mean() < s_plain < s_weighted < f.mean()
    for form in ("shrink", "ppi"):  # equal weights are the plain estimator
        assert rectified(truth[probe], f[probe], f, weights=np.ones(probe.sum()), form=form)[0] == pytest.approx(
            rectified(truth[probe], f[probe], f, form=form)[0])


def test_fit_choice_weights_count_a_probe_as_many():
    # Two copies of a probe weigh as that probe with weight 2 (weights are scaled to mean 1, which an almost
    # vanishing ridge does not see; the utilities are identified only up to a shift, so compare probabilities).
    rng = np.random.default_rng(2)
    n, m = 60, 3
    labels = rng.random((n, m)) < 0.7
    declined = np.zeros((n, m), bool)
    agrees = labels & (rng.random((n, m)) < 0.8)
    split = split_of(np.ones((n, m, m), bool))
    twice = fit_choice(np.r_[agrees, agrees[:30]], np.r_[labels, labels[:30]], np.r_[declined, declined[:30]],
                       np.r_[split, split[:30]], ridge=1e-6)
    weighted = fit_choice(agrees, labels, declined, split, ridge=1e-6, weights=np.r_[np.full(30, 2.0), np.ones(30)])
    plain = fit_choice(agrees, labels, declined, split, ridge=1e-6)
    p = [c.probabilities(labels.astype(float), declined.astype(float), split) for c in (twice, weighted, plain)]
    assert np.allclose(p[0], p[1], atol=2e-3)
    assert not np.allclose(p[0], p[2], atol=2e-3)  # the weights matter


def test_rectified_ppi_is_unbiased_where_the_imputation_is_poor():
    # An imputation shifted by +0.3 and mostly noise: λ is well below 1. Over many probe draws PPI++ centres on
    # the true mean; the default form (the imputed mean plus λ × the residual) keeps about (1 − λ) × 0.3.
    rng = np.random.default_rng(4)
    n = 400
    truth = rng.random((n, 1))
    f = 0.3 * truth + 0.7 * rng.random((n, 1)) + 0.3
    est, shrunk = [], []
    for _ in range(300):
        probe = np.zeros(n, bool)
        probe[rng.choice(n, size=80, replace=False)] = True
        est.append(rectified(truth[probe], f[probe], f, form="ppi")[0])
        shrunk.append(rectified(truth[probe], f[probe], f)[0])
    assert abs(np.mean(est) - truth.mean()) < 0.01 < np.mean(shrunk) - truth.mean()
