"""Onboarding a new model X from a few probes, with X's behaviour imputed on every other training query.

    python -m evaluation.onboard --run-dir runs/cons_default --pool POOL --model MODEL --impute 4 ...

The UniRoute / IRT-Router idea (describe a model by how it answers a small probe set), with the pool's answers
on every query as the context. On the probes X's answer falls into one of the pool's answer groups (the models
it agrees with in meaning, `CascadeData.agree`; a decline is an answer too) or agrees with none of them. An
**answer-choice model** (`fit_choice`, a conditional logit fitted on the probe training rows only) says how:
X "copies" pool model j on query i with probability ∝ exp(α_j + (β + β_s·split_i)·label_ij + γ·declined_ij),
where label_ij is j's consensus label (X answers like the consensus), declined_ij whether j declined and split_i
the share of the pool outside the largest answer group (how contested the query is: how much more, or less, X
sides with the consensus there); or answers unlike every pool model ("unique") ∝ exp(u + δ·split_i +
δ_0·unanimous_i), unanimous_i = [split_i = 0] (a lone answer where the whole pool agrees is its own case).
β_s and δ_0 are fitted only with `split_terms` (measured, not the default: docs/onboarding.md); else 0. A
probe's likelihood sums the copy probabilities of every pool model X agrees with (the group's size counts
through that sum), or is the unique option's when X agrees with none. L2-regularised (`ridge`).

**Imputation** (`impute`): on every training query that is not a probe, X's choice is drawn from the model;
copying j, X takes j's row of agreement and disagreement kinds and j's consensus label; unique, X agrees with
nobody, its disagreement kinds are those of a drawn caller (a near miss of it) and its label is false. X's cost
there is its cost on the probes scaled by the pool's mean cost on that query (a ratio estimate). The probes
keep X's real answers and consensus labels.

**Choice** (`held_out_imputed`): per fold, K imputed copies of the training rows are stacked and every
strategy calling X is simulated on all of them (resolve rules fitted on them too); its estimate is the mean
over the copies. The pool's strategies are estimated on the real training rows (the same numbers as every
copy's). The best fixed strategy per target is chosen as `evaluation.onboard.choose_fixed` does, and scored on
the test fold with the true labels and X's real answers. docs/onboarding.md has what it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from data.verify.agree import DISAGREEMENT_KINDS
from evaluation.strategies import RULE_TOLERANCES, MIRROR, CascadeData, simulate

ARGUMENTS = DISAGREEMENT_KINDS.index("arguments") + 1
SECOND_DECLINES = DISAGREEMENT_KINDS.index("second_declines") + 1
MIRRORED = np.array([0, *(DISAGREEMENT_KINDS.index(MIRROR.get(k, k)) + 1 for k in DISAGREEMENT_KINDS)], np.int8)


@dataclass
class ChoiceModel:
    """A fitted answer-choice model (see the module's docstring); `weights`: α (m), β, γ, u, δ, β_s, δ_0."""

    weights: np.ndarray
    m: int

    def probabilities(self, labels: np.ndarray, declined: np.ndarray, split: np.ndarray) -> np.ndarray:
        """n × (m + 1): the probability that X copies each pool model, and (last) that it answers unlike all."""
        eta = _utilities(self.weights, labels, declined, split, self.m)
        eta -= eta.max(axis=1, keepdims=True)
        p = np.exp(eta)
        return p / p.sum(axis=1, keepdims=True)


def split_of(agree: np.ndarray) -> np.ndarray:
    """Per query: the share of the pool's models outside the largest group that agrees in meaning."""
    m = agree.shape[1]
    return 1.0 - agree.sum(axis=2).max(axis=1) / m


N_SHARED = 6  # β, γ, u, δ, β_s, δ_0: the weights after the m affinities


def _utilities(w: np.ndarray, labels: np.ndarray, declined: np.ndarray, split: np.ndarray, m: int) -> np.ndarray:
    alpha, beta, gamma, u, delta, beta_s, delta_0 = w[:m], *w[m:m + N_SHARED]
    copy = alpha[None, :] + (beta + beta_s * split[:, None]) * labels + gamma * declined
    return np.c_[copy, u + delta * split + delta_0 * (split == 0)]


def _features(labels: np.ndarray, declined: np.ndarray, split: np.ndarray, m: int) -> np.ndarray:
    """n × (m + 1) × p: each option's features (its utility is features · weights)."""
    n = len(labels)
    x = np.zeros((n, m + 1, m + N_SHARED))
    x[:, np.arange(m), np.arange(m)] = 1.0
    x[:, :m, m], x[:, :m, m + 1], x[:, :m, m + 4] = labels, declined, labels * split[:, None]
    x[:, m, m + 2], x[:, m, m + 3], x[:, m, m + 5] = 1.0, split, split == 0
    return x


def fit_choice(agrees_with: np.ndarray, labels: np.ndarray, declined: np.ndarray, split: np.ndarray, *,
               ridge: float = 1.0, split_terms: bool = False, weights: np.ndarray | None = None) -> ChoiceModel:
    """Fit the answer-choice model on probes: `agrees_with` (bool, n × m: X's answer agrees with pool model j),
    the pool's consensus `labels` and `declined` (n × m) and each query's `split` (n). Penalised maximum
    likelihood (L2 `ridge` on every weight), L-BFGS. `split_terms`: also fit β_s and δ_0 (else they stay 0).
    `weights` (n): each probe's weight in the likelihood (inverse inclusion probabilities of a probe design
    that is not uniform), scaled to mean 1; None: every probe 1."""
    from scipy.optimize import minimize

    agrees_with = np.asarray(agrees_with, bool)
    n, m = agrees_with.shape
    if n == 0:
        raise ValueError("fit_choice needs at least one probe")
    observed = np.c_[agrees_with, ~agrees_with.any(axis=1)]  # the options consistent with what X answered
    x = _features(np.asarray(labels, float), np.asarray(declined, float), np.asarray(split, float), m)
    if not split_terms:
        x = x[:, :, :m + N_SHARED - 2]
    sw = None if weights is None else np.asarray(weights, float) / np.mean(weights)

    def loss(w):
        eta = x @ w
        eta -= eta.max(axis=1, keepdims=True)
        e = np.exp(eta)
        prior = e / e.sum(axis=1, keepdims=True)
        e_obs = np.where(observed, e, 0.0)
        post = e_obs / e_obs.sum(axis=1, keepdims=True)
        if weights is None:  # summed as before the weights existed: the same fit to the last bit
            ll = np.log(e_obs.sum(axis=1)).sum() - np.log(e.sum(axis=1)).sum()
            grad = np.einsum("no,nop->p", post - prior, x)
        else:
            ll = (sw * (np.log(e_obs.sum(axis=1)) - np.log(e.sum(axis=1)))).sum()
            grad = np.einsum("n,no,nop->p", sw, post - prior, x)
        return -ll + 0.5 * ridge * w @ w, -grad + ridge * w

    res = minimize(loss, np.zeros(x.shape[2]), jac=True, method="L-BFGS-B")
    return ChoiceModel(np.r_[res.x, np.zeros(m + N_SHARED - x.shape[2])], m)


def impute(cd: CascadeData, new: int, rows: np.ndarray, choice: ChoiceModel, labels: np.ndarray,
           declined: np.ndarray, cost_ratio: float, rng: np.random.Generator
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One draw of X's (column `new`, the last) behaviour on `rows`: (agree rows n_r × m', kinds rows n_r × m',
    fit labels n_r, cost n_r), m' = m + 1 (X's own entry agreeing with itself). `labels` / `declined`: the
    pool's (all rows × m)."""
    m = new
    agree, kinds = cd.agree[rows][:, :m, :m], cd.kinds[rows][:, :m, :m]
    lab, dec = labels[rows][:, :m], declined[rows][:, :m]
    p = choice.probabilities(lab.astype(float), dec.astype(float), split_of(agree))
    u = rng.random((len(rows), 1))
    pick = np.minimum((p.cumsum(axis=1) < u).sum(axis=1), m)  # m: unique
    r = np.arange(len(rows))
    src = np.minimum(pick, m - 1)
    unique = pick == m
    if unique.any():  # a near miss of a drawn caller (by the copy probabilities among callers)
        q = np.where(dec, 0.0, p[:, :m])
        q_sum = q.sum(axis=1, keepdims=True)
        q = np.where(q_sum > 0, q / np.where(q_sum > 0, q_sum, 1.0), 1.0 / m)
        near = np.minimum((q.cumsum(axis=1) < rng.random((len(rows), 1))).sum(axis=1), m - 1)
        src = np.where(unique, near, src)
    a_row = agree[r, src].copy()
    k_row = kinds[r, src].copy()
    a_row[unique] = False
    k_row[r, src] = np.where(unique, np.where(dec[r, src], SECOND_DECLINES, ARGUMENTS), 0)
    k_row[unique] = np.where(dec[unique], SECOND_DECLINES, np.where(k_row[unique] == 0, ARGUMENTS, k_row[unique]))
    fit = np.where(unique, False, lab[r, src])
    out_a = np.c_[a_row, np.ones(len(rows), bool)]
    out_k = np.c_[k_row, np.zeros(len(rows), np.int8)].astype(np.int8)
    cost = cost_ratio * cd.data.cost[rows][:, :m].mean(axis=1)
    return out_a, out_k, fit, cost


def stacked(cd: CascadeData, fit: np.ndarray, new: int, copies: list[tuple], train: np.ndarray, test: np.ndarray,
            extra: list[tuple] = ()) -> tuple[CascadeData, np.ndarray]:
    """K imputed copies of the training rows, then the `extra` segments, then the test rows (real):
    (CascadeData, which rows are the test ones). Each copy: (rows imputed, agree rows, kinds rows, fit labels,
    cost) — the training rows not in it are real; an extra segment is a copy whose rows are all imputed. Fit
    labels on the training copies, the true labels on the test rows."""
    d = cd.data
    segments = [(train, c) for c in copies] + [(c[0], c) for c in extra]
    rows = np.concatenate([*(base for base, _ in segments), test]).astype(int)
    agree, kinds = cd.agree[rows].copy(), cd.kinds[rows].copy()
    correct = np.where(np.isin(np.arange(len(d.example_ids)), test)[:, None], d.correct, fit)[rows]
    cost, latency = d.cost[rows].copy(), cd.latency[rows].copy()
    start = 0
    for base, (imp_rows, a_row, k_row, lab, paid) in segments:
        pos = {int(i): k for k, i in enumerate(base)}
        at = start + np.array([pos[int(i)] for i in imp_rows], int)
        agree[at, new, :], agree[at, :, new] = a_row, a_row
        kinds[at, new, :], kinds[at, :, new] = k_row, MIRRORED[k_row]
        correct[at, new], cost[at, new] = lab, paid
        latency[at, new] = np.nan  # X's real latency off its probes is not known either
        start += len(base)
    data = replace(d, example_ids=[d.example_ids[i] for i in rows], categories=d.categories[rows], correct=correct,
                   cost=cost, folds=d.folds[rows])
    is_test = np.zeros(len(rows), bool)
    is_test[start:] = True
    return CascadeData(data, agree, latency, cd.latency_known, kinds), is_test


RECTIFY_FORMS = ("shrink", "ppi")


def rectified(real: np.ndarray, imputed_probe: np.ndarray, imputed_all: np.ndarray,
              weights: np.ndarray | None = None, form: str = "shrink") -> np.ndarray:
    """Per column (strategy): the mean of Y over every training row (n_all) from the imputed outcomes on every
    row (`imputed_all`) and the probes' real and imputed ones (`real`, `imputed_probe`, n_p rows), with
    λ = Cov(Y, Ŷ) / ((1 + n_p / n_all) Var(Ŷ)) on the probes, clipped to [0, 1] (the variance-minimising weight
    of prediction-powered inference, PPI++). Two forms:

    - "shrink" (the default, measured best for choosing a strategy: docs/onboarding.md): the imputed mean plus
      λ × the probes' mean residual (real − imputed). λ = 1 is PPI's unbiased estimate; for λ < 1 it keeps part
      of the imputation's bias and less of the probes' noise — a shrinkage toward the imputation, not PPI++.
      (Sessions 9–10 documented it as PPI++; it is not.)
    - "ppi": PPI++ itself, the probes' mean plus λ × (the imputed mean over every row − the imputed mean on the
      probes): unbiased for every λ; λ = 0 is the probes' own mean.

    `weights` (n_p): probes drawn unequally — their inverse inclusion probabilities; the probe means, variance
    and covariance are then weighted (Hájek) and n_p is Kish's effective size. None: every probe alike."""
    if form not in RECTIFY_FORMS:
        raise ValueError(f"form must be one of {RECTIFY_FORMS}, got {form!r}")
    y, f = real.astype(float), imputed_probe.astype(float)
    n_all = len(imputed_all)
    if weights is None:  # plain moments, computed as sessions 9–10 did (the same choices to the last bit)
        n_eff = len(y)
        mu_y, mu_f = y.mean(0), f.mean(0)
        var = f.var(axis=0, ddof=1) if n_eff > 1 else np.zeros(f.shape[1])
        cov = ((y - mu_y) * (f - mu_f)).sum(0) / max(n_eff - 1, 1)
    else:
        w = np.asarray(weights, float) / np.sum(weights)
        n_eff = 1.0 / (w ** 2).sum()
        mu_y, mu_f = w @ y, w @ f
        unbias = n_eff / (n_eff - 1) if n_eff > 1 else 0.0
        var = (w @ (f - mu_f) ** 2) * unbias
        cov = (w @ ((y - mu_y) * (f - mu_f))) * unbias
    lam = np.clip(np.divide(cov, (1 + n_eff / n_all) * var, out=np.zeros_like(cov), where=var > 0), 0.0, 1.0)
    mean_all = imputed_all.astype(float).mean(0)
    if form == "ppi":
        return mu_y + lam * (mean_all - mu_f)
    return mean_all + lam * (mu_y - mu_f)


def contested_probes(split: np.ndarray, size: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A probe design that asks X where the pool disagrees: `size` queries drawn without replacement with
    probability ∝ split_i + 1/m (`split_of`, from the pool's answers alone, known before X is asked; 1/m keeps
    every query possible). Returns (probe mask, inverse inclusion probabilities): the inclusion probability is
    taken as the Poisson one, min(1, c·w_i) with c set so they sum to `size` (capped iteratively) — close to,
    not exactly, that of sequential drawing without replacement."""
    n = len(split)
    size = min(size, n)
    w = np.asarray(split, float) + 1.0 / m
    pi = np.zeros(n)
    free = np.ones(n, bool)
    left = float(size)
    for _ in range(n):  # cap at 1 and spread what is left over the rest
        pi[free] = left * w[free] / w[free].sum()
        over = free & (pi >= 1.0)
        if not over.any():
            break
        pi[over], free[over] = 1.0, False
        left = size - float((~free).sum())
    probe = np.zeros(n, bool)
    probe[rng.choice(n, size=size, replace=False, p=w / w.sum())] = True
    return probe, 1.0 / pi


def relabelled(cd: CascadeData, new: int, probes: np.ndarray, test: np.ndarray, declined: np.ndarray,
               draws: list[tuple], extra: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """X's imputed labels redone as its probe labels are made: by the consensus of all m + 1 models' answers
    (`data.consensus.fit_consensus`), X's imputed answer voting too, instead of copied from the model it copies
    (whose label comes from the pool's vote alone). Per copy c, one EM over every query: X's answers are copy
    c's where imputed, its real ones on the probes (or, for the probes' own imputed copy, copy c's there) and
    unknown on the test rows. X declined where it copies a model that declined."""
    from data.consensus import fit_consensus

    m = new
    answered = np.ones((len(cd.data.example_ids), m + 1), bool)
    answered[test, m] = False

    def label(segments: list[tuple], keep: int) -> tuple:
        agree, dec = cd.agree.copy(), declined.copy()  # X's real answers on the probes unless a segment covers them
        for rows, a_row, *_ in segments:
            agree[rows, m, :], agree[rows, :, m] = a_row, a_row
            dec[rows, m] = (a_row[:, :m] & declined[rows, :m]).any(axis=1)
        lab = fit_consensus(agree, answered, dec).correct[:, m]
        rows, a_row, k_row, _, paid = segments[keep]
        return rows, a_row, k_row, lab[rows], paid

    new_draws = [label([d], 0) for d in draws]
    new_extra = [label([d, e], 1) for d, e in zip(draws, extra)]
    return new_draws, new_extra


def held_out_imputed(cd: CascadeData, fit: np.ndarray, *, probe: np.ndarray, new: int, pool_labels: np.ndarray,
                     declined: np.ndarray, copies: int = 4, rng: np.random.Generator, cache: dict | None = None,
                     budgets: dict[int, float] | None = None, anchor_models: int | None = None,
                     rules: tuple[float, ...] = RULE_TOLERANCES, ridge: float = 1.0, rectify: bool | str = False,
                     relabel: bool = False, split_terms: bool = False, probe_weight: np.ndarray | None = None) -> dict:
    """Per target: (correct, cost) per query of the best fixed strategy, chosen per fold with X (column `new`,
    the last) imputed off its probes (`copies` draws) and scored with the true labels on the test fold.
    `fit`: fit labels (the pool's consensus labels; X's on its probes); `pool_labels`: the pool's consensus
    labels X's imputed answers copy; `declined`: who declined (n × m + 1). `cache`: the pool's simulations per
    fold (as `held_out_fixed_gates` keeps them). `rectify`: the estimate of a strategy calling X is instead the
    mean with X imputed on every training row (probes too, K more copies of them) plus the probes' residual,
    real minus imputed (`rectified`; True or "shrink": its default form, "ppi": PPI++). `relabel`: X's imputed
    labels from the consensus of every model's answers, X's imputed one included (`relabelled`), as X's probe
    labels are. `split_terms`: also fit the choice model's β_s and δ_0 (`fit_choice`; else they stay 0).
    `probe_weight` (n): the probes' inverse inclusion probabilities where they were not drawn uniformly
    (`contested_probes`): the choice model, X's cost ratio and the rectifier weight each probe by it; None:
    uniform."""
    from evaluation.onboard import TARGETS, choose_fixed, menu_roles, with_labels

    form = "shrink" if rectify is True else rectify
    if rectify and form not in RECTIFY_FORMS:
        raise ValueError(f"rectify must be True or one of {RECTIFY_FORMS}, got {rectify!r}")
    m1 = len(cd.data.models)
    if new != m1 - 1:
        raise ValueError("the new model must be the last column")
    if cd.kinds is None:
        raise ValueError("imputation needs the kinds of disagreement: build CascadeData with from_outputs")
    specs, uses_new, anchors = menu_roles(m1, rules, new, anchor_models)
    a_cols, b_cols = np.flatnonzero(~uses_new), np.flatnonzero(uses_new)
    n = len(cd.data.example_ids)
    outs = {t: (np.zeros(n, bool), np.zeros(n)) for t, _ in TARGETS}
    pool_dec = declined[:, :new]
    pool_mean = cd.data.cost[:, :new].mean(axis=1)  # the pool's mean cost per query (X's cost is a ratio of it)
    for k in cd.data.fold_ids:
        test = cd.data.folds == k
        train = np.flatnonzero(~test)
        ptrain = np.flatnonzero(~test & probe)
        if len(ptrain) == 0:
            raise ValueError(f"fold {k}: no probe query among the training rows; draw more probes")
        cdk = with_labels(cd, fit, test)
        costs = cd.data.cost[train].mean(axis=0)
        pw = None if probe_weight is None else probe_weight[ptrain]
        w = 1.0 if pw is None else pw  # × 1.0 is exact: uniform probes give the unweighted ratio to the last bit
        ratio = float((w * cd.data.cost[ptrain, new]).sum() / (w * pool_mean[ptrain]).sum())
        costs[new] = ratio * pool_mean[train].mean()
        sa = cache.get(k) if cache is not None else None
        if sa is None:
            sa = simulate(cdk, [specs[i] for i in a_cols], costs, fit_rows=train)
            if cache is not None:
                cache[k] = sa
        model = fit_choice(cd.agree[ptrain, new, :new], pool_labels[ptrain], pool_dec[ptrain],
                           split_of(cd.agree[ptrain][:, :new, :new]), ridge=ridge, split_terms=split_terms,
                           weights=pw)
        rest = np.setdiff1d(train, ptrain)
        draws = [(rest, *impute(cd, new, rest, model, pool_labels, pool_dec, ratio, rng)) for _ in range(copies)]
        extra = [(ptrain, *impute(cd, new, ptrain, model, pool_labels, pool_dec, ratio, rng)) for _ in range(copies)
                 ] if rectify else []
        if relabel:
            draws, extra = relabelled(cd, new, ptrain, np.flatnonzero(test), declined, draws, extra)
        big, is_test = stacked(cd, fit, new, draws, train, np.flatnonzero(test), extra)
        fit_rows = np.arange(copies * len(train))  # the rules are fitted on the training copies only
        sb = simulate(big, [specs[i] for i in b_cols], costs, fit_rows=fit_rows)
        acc, paid = np.zeros(len(specs)), np.zeros(len(specs))
        acc[a_cols], paid[a_cols] = sa.correct[train].mean(axis=0), sa.cost[train].mean(axis=0)
        if rectify:
            n_t, n_p = len(train), len(ptrain)
            at_probe = np.searchsorted(train, ptrain)  # the probe rows' place in each training copy (real there)
            at_rest = np.flatnonzero(~np.isin(train, ptrain))
            extra_rows = copies * n_t + np.arange(copies * n_p).reshape(copies, n_p)
            for field, out in (("correct", acc), ("cost", paid)):
                v = getattr(sb, field)
                f_probe = np.mean([v[r] for r in extra_rows], axis=0)
                f_rest = np.mean([v[c * n_t + at_rest] for c in range(copies)], axis=0)
                out[b_cols] = rectified(v[at_probe], f_probe, np.r_[f_probe, f_rest],
                                        weights=pw, form=form)
        else:
            acc[b_cols], paid[b_cols] = sb.correct[fit_rows].mean(axis=0), sb.cost[fit_rows].mean(axis=0)
        where_b = {int(c): i for i, c in enumerate(b_cols)}
        where_a = {int(c): i for i, c in enumerate(a_cols)}
        for t, f in TARGETS:
            j = choose_fixed(acc, paid, anchors, t, f, budgets[k] if budgets is not None and t == "cost_fraction"
                             else None)
            if uses_new[j]:
                ok, c = sb.correct[is_test, where_b[j]], sb.cost[is_test, where_b[j]]
            else:
                ok, c = sa.correct[test, where_a[j]], sa.cost[test, where_a[j]]
            outs[t][0][test], outs[t][1][test] = ok, c
    return outs


__all__ = ["RECTIFY_FORMS", "ChoiceModel", "contested_probes", "fit_choice", "held_out_imputed", "impute", "relabelled", "split_of",
           "stacked"]
