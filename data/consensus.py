"""Consensus labels: each (query, model) labelled from agreement in meaning among the pool's answers, with no
expected answer (no ground truth).

    switchcraft label --consensus [--pool configs/pool.yaml] [--run-dir runs/default]

    from data.consensus import consensus_labels
    res = consensus_labels(answers, tools)          # the learn step's entry point
    res.frame                                       # example_id, model, correct, p_correct, confidence, abstained
    res.reliability                                 # model -> estimated accuracy (when it calls, when it declines)

`consensus_labels(answers, tools, *, languages=None, models=None, config=ConsensusConfig(), workers=1)
-> ConsensusResult` (`workers` > 1: the agreement checks in that many processes; the same labels)
- `answers`: a DataFrame or an iterable of mappings with `example_id`, `model` and `calls` (a list of
  `data.schema.Call` or `{"name", "arguments"}` dicts; None or [] for an answer that makes no call — a native
  function-calling model's text answer is no call, `data.verify.agree.effective_calls`). A (query, model) pair
  with no row is "not asked": it gets no label and takes no part in that query's vote (exploration logs and
  new models answer only some queries).
- `tools`: example_id -> the tools offered with that query (what the agreement check compares calls against);
  `languages`: example_id -> "python" | "java" | "javascript" (default python).
- `models`: the column order (default: sorted names).

How (`fit_consensus`, on the agreement tensor): for each query every distinct answer is a hypothesis for the
right one, its supporters being the models whose answers agree with it in meaning (`data.verify.agree.
calls_agree`, both directions) (optionally also the hypothesis that no answer is right). A model is right with its
reliability r (one per model; optionally two, one when it calls and one when it declines), so a hypothesis' likelihood is
the product of r over its supporters and (1 - r) over the other answering models. An EM of the Dawid–Skene
kind alternates the posterior over hypotheses per query and each model's reliability (its expected accuracy,
Beta(1, 1)-smoothed). A model that never declines, even where most others do (forced tool choice), has no
vote on queries where some model declined (`forced_callers`): its call there says nothing about whether to
call. A label's `p_correct` is the posterior of the hypotheses the model's answer supports; `correct` =
p_correct > 0.5; `confidence` = max(p, 1 - p); a query is `abstained` when no hypothesis reaches
`min_support` posterior (no group is supported): its labels are still the most probable ones, flagged.
docs/consensus.md has the measured agreement with the verifier's labels and the variants compared.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from data.errors import DataError
from data.schema import Call, Example, Label, Output, Tool


@dataclass(frozen=True)
class ConsensusConfig:
    # One reliability per model (default), or two: one when it calls, one when it declines. Two coins gain
    # nothing on the default pool (92.62% vs 92.59%) and collapse on drawn pools (83-84% vs 91-92%: declining
    # reliabilities run to 0 when most of the pool calls on relevance queries); docs/consensus.md.
    two_coin: bool = False
    # Pseudo-answers pulling a model's declining reliability toward its calling one (0: independent coins).
    decline_prior: float = 0.0
    # "No answer is right" as a hypothesis of its own: measured the same on the default pool (92.6%), and on a
    # few queries the EM can drift to "everyone is wrong" (docs/consensus.md); off by default.
    none_hypothesis: bool = False
    # A model that never declines, not even on queries where most of the others decline (forced tool choice:
    # "-FC-Any"-style deployments), says nothing about whether to call at all: where some model declined, its
    # vote is left out (it still gets a label). Decided from the answers, never from names: it must have called
    # on at least `forced_evidence` queries that most other answering models declined, so a pool whose traffic
    # always needs a call (nobody declines but one model's stray text answer) mutes no one.
    mute_never_decliners: bool = True
    forced_evidence: int = 5
    min_support: float = 0.5  # a query whose best hypothesis is below this posterior is abstained
    max_iter: int = 50
    tol: float = 1e-5
    init_reliability: float = 0.7  # the same for every model: the first E-step is a plurality vote


@dataclass
class Consensus:
    """The EM's result on an agreement tensor (rows = queries, columns = models)."""

    p_correct: np.ndarray  # float, n × m; NaN where the model did not answer
    support: np.ndarray  # float, n: the posterior of each query's most probable hypothesis
    none: np.ndarray  # float, n: the posterior that no answer is right
    reliability: np.ndarray  # float, 2 × m: (calling, declining) estimated accuracy
    iterations: int
    config: ConsensusConfig

    @property
    def correct(self) -> np.ndarray:
        return np.nan_to_num(self.p_correct, nan=0.0) > 0.5

    @property
    def abstained(self) -> np.ndarray:
        return self.support < self.config.min_support

    @property
    def confidence(self) -> np.ndarray:
        return np.maximum(self.p_correct, 1 - self.p_correct)


def _hypotheses(agree: np.ndarray, answered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query of each candidate, n_cand × m supporter mask): every distinct answer's supporters, per query."""
    qs, masks = [], []
    for i in range(agree.shape[0]):
        seen = set()
        for j in np.flatnonzero(answered[i]):
            s = agree[i, j] & answered[i]
            s[j] = True
            key = s.tobytes()
            if key not in seen:
                seen.add(key)
                qs.append(i)
                masks.append(s)
    m = agree.shape[1]
    return np.asarray(qs, dtype=int), (np.asarray(masks, dtype=bool) if masks else np.zeros((0, m), bool))


def forced_callers(answered: np.ndarray, declined: np.ndarray, evidence: int) -> np.ndarray:
    """(m,) bool: models that never decline though they called on at least `evidence` queries that most of the
    other answering models declined — forced tool choice, whose calls carry no vote on whether to call."""
    others_answered = answered.sum(1, keepdims=True) - answered
    others_declined = declined.sum(1, keepdims=True) - declined
    overruled = answered & ~declined & (2 * others_declined > others_answered) & (others_answered > 0)
    return answered.any(0) & ~declined.any(0) & (overruled.sum(0) >= evidence)


def fit_consensus(agree: np.ndarray, answered: np.ndarray | None = None, declined: np.ndarray | None = None,
                  config: ConsensusConfig | None = None) -> Consensus:
    """The EM on `agree` (bool, n × m × m: do models a and b's answers to query i mean the same calls),
    `answered` (bool, n × m; default all) and `declined` (bool, n × m: the answer makes no call; needed for
    the two-coin model, else one coin)."""
    cfg = config or ConsensusConfig()
    agree = np.asarray(agree, dtype=bool)
    if agree.ndim != 3 or agree.shape[1] != agree.shape[2]:
        raise ValueError(f"agree must be n × m × m, got shape {agree.shape}")
    n, m, _ = agree.shape
    answered = np.ones((n, m), bool) if answered is None else np.asarray(answered, dtype=bool)
    coin = np.zeros((n, m), int) if declined is None or not cfg.two_coin else np.asarray(declined, dtype=bool).astype(int)
    votes = answered
    if declined is not None and cfg.mute_never_decliners:
        dec = np.asarray(declined, dtype=bool) & answered
        votes = answered & ~(forced_callers(answered, dec, cfg.forced_evidence)[None, :] & dec.any(1)[:, None])
    q, mask = _hypotheses(agree, answered)
    k = np.bincount(q, minlength=n).astype(float)  # hypotheses (answers) per query
    rel = np.full((2, m), cfg.init_reliability)
    pi0 = 0.05 if cfg.none_hypothesis else 0.0
    cols = np.arange(m)
    iterations = 0
    for iterations in range(1, cfg.max_iter + 1):  # noqa: B007 - the count is returned
        lr, lw = np.log(rel[coin, cols]), np.log1p(-rel[coin, cols])  # n × m
        lr, lw = np.where(votes, lr, 0.0), np.where(votes, lw, 0.0)
        ll = (mask * lr[q]).sum(1) + ((votes[q] & ~mask) * lw[q]).sum(1) - np.log(np.maximum(k[q], 1))
        ll += np.log1p(-pi0) if pi0 > 0 else 0.0
        ll_none = np.log(pi0) + lw.sum(1) if pi0 > 0 else np.full(n, -np.inf)
        top = ll_none.copy()
        np.maximum.at(top, q, ll)
        w, w_none = np.exp(ll - top[q]), np.exp(ll_none - top)
        z = w_none.copy()
        np.add.at(z, q, w)
        post, post_none = w / z[q], w_none / z
        p = np.zeros((n, m))
        np.add.at(p, q, mask * post[:, None])
        p = np.minimum(p, 1.0)
        new = rel.copy()
        for c in (0, 1):
            here = votes & (coin == c)
            prior = (cfg.decline_prior * new[0], cfg.decline_prior) if c == 1 else (0.0, 0.0)
            new[c] = (np.where(here, p, 0).sum(0) + 1 + prior[0]) / (here.sum(0) + 2 + prior[1])
        new = np.clip(new, 0.01, 0.99)
        new_pi0 = float(np.clip((post_none.sum() + 1) / (n + 2), 1e-3, 0.5)) if cfg.none_hypothesis else 0.0
        done = np.abs(new - rel).max() < cfg.tol and abs(new_pi0 - pi0) < cfg.tol
        rel, pi0 = new, new_pi0
        if done:
            break
    support = post_none.copy()
    np.maximum.at(support, q, post)
    return Consensus(np.where(answered, p, np.nan), support, post_none, rel, iterations, cfg)


def error_sharing_pairs(agree: np.ndarray, correct: np.ndarray, answered: np.ndarray | None = None,
                        shared: float = 0.5) -> np.ndarray:
    """(m × m bool) pairs of models that share most of their errors: a and b are paired when, on the queries
    where a is wrong (by `correct`, e.g. consensus labels) and b answered, b's answer agrees with a's at least
    `shared` of the time, and the same with a and b swapped. Their agreement checks nothing — consensus labels
    cannot see an error they make together, and an agreement cascade between them accepts it."""
    agree = np.asarray(agree, dtype=bool)
    n, m, _ = agree.shape
    answered = np.ones((n, m), bool) if answered is None else np.asarray(answered, dtype=bool)
    wrong = answered & ~np.asarray(correct, dtype=bool)
    rate = np.zeros((m, m))
    for a in range(m):
        for b in range(m):
            rows = wrong[:, a] & answered[:, b]
            if a != b and rows.any():
                rate[a, b] = agree[rows, a, b].mean()
    return np.minimum(rate, rate.T) >= shared


# --- from answers ---------------------------------------------------------------


def _as_calls(v: Any) -> list[Call]:
    if v is None or (isinstance(v, float) and v != v):
        return []
    if isinstance(v, str):
        v = json.loads(v)
    out = []
    for c in v:
        if isinstance(c, Call):
            out.append(c)
        elif isinstance(c, Mapping):
            out.append(Call(name=str(c.get("name")), arguments=dict(c.get("arguments") or {})))
        else:
            raise DataError(f"a call must be a Call or a {{name, arguments}} mapping, got {type(c).__name__}",
                            field="calls")
    return out


def agreement_tensor(answers: pd.DataFrame | Iterable[Mapping[str, Any]], tools: Mapping[str, Sequence[Tool]], *,
                     languages: Mapping[str, str] | None = None, models: Sequence[str] | None = None,
                     workers: int = 1) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(example ids, models, agree n × m × m, answered n × m, declined n × m) from answer rows; `workers` > 1:
    the agreement checks (the cost: m(m-1)/2 per query) run in that many processes, the same result."""
    from data.verify.agree import NoAnswer

    rows = answers.to_dict(orient="records") if isinstance(answers, pd.DataFrame) else list(answers)
    for n_row, r in enumerate(rows):
        for f in ("example_id", "model"):
            if f not in r or r[f] is None:
                raise DataError(f"answer row {n_row} has no {f!r}", field=f)
    names = list(models) if models is not None else sorted({str(r["model"]) for r in rows})
    col = {name: j for j, name in enumerate(names)}
    ids = sorted({str(r["example_id"]) for r in rows})
    row = {e: i for i, e in enumerate(ids)}
    n, m = len(ids), len(names)
    calls: list[list[list[Call] | None]] = [[None] * m for _ in range(n)]
    for n_row, r in enumerate(rows):
        if str(r["model"]) not in col or isinstance(r.get("calls"), NoAnswer):  # no answer: not heard, no vote
            continue
        e = str(r["example_id"])
        if e not in tools:
            raise DataError(f"answer row {n_row}: no tools for example {e!r}", field="example_id",
                            hint="pass the tools offered with every answered query")
        i, j = row[e], col[str(r["model"])]
        if calls[i][j] is not None:
            raise DataError(f"answer row {n_row}: a second answer of {names[j]} to {e!r}", field="model")
        calls[i][j] = _as_calls(r.get("calls"))
    answered = np.array([[c is not None for c in rowc] for rowc in calls], dtype=bool).reshape(n, m)
    declined = np.array([[c is not None and not c for c in rowc] for rowc in calls], dtype=bool).reshape(n, m)
    jobs = [(tools[e], calls[i], (languages or {}).get(e)) for i, e in enumerate(ids)]
    agree = np.zeros((n, m, m), dtype=bool)
    if workers > 1 and n > 1:  # each query's agreements are its own: chunks of queries in worker processes
        size = -(-n // (4 * workers))
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = pool.map(_chunk_agreement, (jobs[k:k + size] for k in range(0, n, size)))
            for k, part in zip(range(0, n, size), done):
                agree[k:k + len(part)] = part
    else:
        agree[:] = _chunk_agreement(jobs).reshape(n, m, m)
    return ids, names, agree, answered, declined


def query_agreement(tools: Sequence[Tool], calls: Sequence[list[Call] | None], language: str | None) -> np.ndarray:
    """(m × m bool) which answers to one query mean the same calls (`calls[j]` None: model j did not answer)."""
    from data.verify.agree import calls_agree

    here = [j for j, c in enumerate(calls) if c is not None]
    agree = np.zeros((len(calls), len(calls)), dtype=bool)
    agree[here, here] = True
    for a, b in itertools.combinations(here, 2):
        agree[a, b] = agree[b, a] = calls_agree(tools, calls[a], calls[b], language=language)
    return agree


def _chunk_agreement(jobs: list[tuple]) -> np.ndarray:
    return np.stack([query_agreement(*job) for job in jobs]) if jobs else np.zeros((0, 0, 0), dtype=bool)


@dataclass
class ConsensusResult:
    example_ids: list[str]
    models: list[str]
    consensus: Consensus
    frame: pd.DataFrame  # one row per answered (example, model): correct, p_correct, confidence, abstained
    reliability: dict[str, dict[str, float]] = field(default_factory=dict)


def consensus_labels(answers: pd.DataFrame | Iterable[Mapping[str, Any]], tools: Mapping[str, Sequence[Tool]], *,
                     languages: Mapping[str, str] | None = None, models: Sequence[str] | None = None,
                     config: ConsensusConfig | None = None, workers: int = 1) -> ConsensusResult:
    """Consensus labels from answer rows (see the module docstring): the learn step's entry point. `workers`:
    processes for the agreement checks (`agreement_tensor`); the labels do not depend on it."""
    ids, names, agree, answered, declined = agreement_tensor(answers, tools, languages=languages, models=models,
                                                             workers=workers)
    return result_of(ids, names, fit_consensus(agree, answered, declined, config))


def result_of(ids: list[str], names: list[str], con: Consensus) -> ConsensusResult:
    i, j = np.nonzero(~np.isnan(con.p_correct))
    frame = pd.DataFrame({
        "example_id": np.asarray(ids, dtype=object)[i], "model": np.asarray(names, dtype=object)[j],
        "correct": con.correct[i, j], "p_correct": con.p_correct[i, j], "confidence": con.confidence[i, j],
        "abstained": con.abstained[i]})
    r = con.reliability if con.config.two_coin else con.reliability[[0, 0]]  # one coin: the same both ways
    rel = {name: {"calling": float(r[0, c]), "declining": float(r[1, c])} for c, name in enumerate(names)}
    return ConsensusResult(ids, names, con, frame, rel)


def answers_of_outputs(outputs: Iterable[Output], pool) -> list[dict]:
    """Answer rows of a pool's recorded outputs (pool names; a native model's text answer is no call). An
    output that is no answer (an inference error) gives no row: that model was not heard on that query, so it
    takes no part in its vote."""
    from data.decoders.base import is_no_answer
    from data.verify.agree import effective_calls
    from data.verify.batch import is_text

    by_recording = {m.recording: m for m in pool.models} | {m.name: m for m in pool.models}
    rows = []
    for o in outputs:
        pm = by_recording.get(o.model)
        if pm is None or o.calls is None and is_no_answer(o.decode_error):
            continue
        native_text = pm.prompt_style == "native" and is_text(o.raw)
        rows.append({"example_id": o.example_id, "model": pm.name,
                     "calls": effective_calls(o.calls, o.decode_error, native_text=native_text)})
    return rows


def consensus_of_outputs(outputs: Iterable[Output], examples: Mapping[str, Example], pool,
                         config: ConsensusConfig | None = None, workers: int = 1) -> ConsensusResult:
    from data.verify import language_of

    rows = answers_of_outputs(outputs, pool)
    ids = {r["example_id"] for r in rows}
    missing = sorted(ids - set(examples))
    if missing:
        raise DataError(f"{len(missing)} outputs answer unknown examples, e.g. {missing[:3]}",
                        hint="pass the examples these outputs answer")
    return consensus_labels(rows, {e: examples[e].tools for e in ids}, languages={e: language_of(examples[e]) for e in ids},
                            models=pool.names, config=config, workers=workers)


# --- against ground truth -------------------------------------------------------


def agreement_with_truth(frame: pd.DataFrame, truth: Iterable[Label], categories: Mapping[str, str] | None = None
                         ) -> dict[str, Any]:
    """Share of (query, model) labels equal to the verifier's: overall, on non-abstained queries, per model,
    per category; and the accuracy each gives every model."""
    t = pd.DataFrame([{"example_id": lb.example_id, "model": lb.model, "true": bool(lb.correct)} for lb in truth])
    d = frame.merge(t, on=["example_id", "model"], how="inner")
    if d.empty:
        raise DataError("no (example, model) pair has both a consensus and a true label")
    d["same"] = d["correct"] == d["true"]
    d["category"] = d["example_id"].map(categories or {}).fillna("")
    kept = d[~d["abstained"]]
    per_model = {m: {"agreement": float(g["same"].mean()), "consensus_accuracy": float(g["correct"].mean()),
                     "true_accuracy": float(g["true"].mean()), "pairs": int(len(g))}
                 for m, g in d.groupby("model", sort=False)}
    per_cat = {c: {"agreement": float(g["same"].mean()), "pairs": int(len(g))}
               for c, g in d.groupby("category") if c}
    rank = pd.DataFrame(per_model).T
    spearman = float(rank["consensus_accuracy"].rank().corr(rank["true_accuracy"].rank())) if len(rank) > 1 else float("nan")
    return {"agreement": float(d["same"].mean()), "pairs": int(len(d)),
            "abstained_queries": int(d.loc[d["abstained"], "example_id"].nunique()),
            "queries": int(d["example_id"].nunique()),
            "agreement_not_abstained": float(kept["same"].mean()) if len(kept) else float("nan"),
            "agreement_abstained": float(d.loc[d["abstained"], "same"].mean()) if d["abstained"].any() else float("nan"),
            "accuracy_rank_spearman": spearman, "per_model": per_model, "per_category": per_cat}


# --- the command ------------------------------------------------------------------


CONSENSUS_LABELS = "labels_consensus.parquet"


@dataclass
class ConsensusRun:
    labels_path: Path
    meta_path: Path
    result: ConsensusResult
    agreement: dict[str, Any] | None
    seconds: float


def to_labels(res: ConsensusResult, costs: Mapping[tuple[str, str], float | None],
              no_answer: Iterable[tuple[str, str]] = ()) -> pd.DataFrame:
    """The Label contract's columns (reason "ok" / "consensus_wrong", detail p=…) plus p_correct, confidence,
    abstained: `data.schema.read_labels` reads it as labels. `no_answer`: (example, model) pairs whose output was
    an inference error — known wrong without any expected answer, labelled `no_answer` as the verifier does
    (they cast no vote)."""
    f = res.frame
    answered = pd.DataFrame({
        "example_id": f["example_id"], "model": f["model"], "correct": f["correct"].astype(bool),
        "reason": np.where(f["correct"], "ok", "consensus_wrong"),
        "detail": [f"consensus p={p:.3f}" + (" abstained" if a else "") for p, a in zip(f["p_correct"], f["abstained"])],
        "cost_usd": [costs.get((e, m)) for e, m in zip(f["example_id"], f["model"])],
        "p_correct": f["p_correct"], "confidence": f["confidence"], "abstained": f["abstained"].astype(bool)})
    seen = set(zip(f["example_id"], f["model"]))
    errors = [(e, m) for e, m in no_answer if (e, m) not in seen]
    if not errors:
        return answered
    failed = pd.DataFrame({
        "example_id": [e for e, _ in errors], "model": [m for _, m in errors], "correct": False, "reason": "no_answer",
        "detail": "inference error: no answer (no vote)", "cost_usd": [costs.get(k) for k in errors],
        "p_correct": 0.0, "confidence": 1.0, "abstained": False})
    return pd.concat([answered, failed], ignore_index=True)


def run_consensus_labels(pool_path: str | Path, outputs_path: str | Path, examples_path: str | Path,
                         run_dir: str | Path, *, truth: str | Path | None = None,
                         config: ConsensusConfig | None = None, workers: int = 1) -> ConsensusRun:
    """Consensus-label every output of the pool's models into `<run_dir>/labels_consensus.parquet`; with
    `truth` (a labels.parquet from the verifier), the agreement with it, in `labels_consensus.json`; `workers`:
    processes for the agreement checks."""
    from data.labels import load_examples, load_outputs
    from data.pool import load_pool
    from data.schema import read_labels

    t0 = time.perf_counter()
    pool = load_pool(pool_path)
    examples = load_examples(examples_path)
    outputs = load_outputs(outputs_path, examples, pool)
    res = consensus_of_outputs(outputs, examples, pool, config, workers)
    if res.frame.empty:
        raise DataError("no outputs of any pool model", path=outputs_path, hint=f"pool models: {', '.join(pool.names)}")
    by_recording = {m.recording: m for m in pool.models} | {m.name: m for m in pool.models}
    costs = {(o.example_id, by_recording[o.model].name): by_recording[o.model].prices.output_cost_usd(o)
             for o in outputs if o.model in by_recording}
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    path = run / CONSENSUS_LABELS
    from data.decoders.base import is_no_answer

    no_answer = [(o.example_id, by_recording[o.model].name) for o in outputs
                 if o.model in by_recording and o.calls is None and is_no_answer(o.decode_error)]
    to_labels(res, costs, no_answer).to_parquet(path, index=False)
    agreement = None
    if truth is not None and Path(truth).exists():
        agreement = agreement_with_truth(res.frame, read_labels(truth), {e: x.category for e, x in examples.items()})
    seconds = time.perf_counter() - t0
    meta = {"command": "switchcraft label --consensus", "pool": str(pool_path), "outputs": str(outputs_path),
            "labels": int(len(res.frame)) + len(set(no_answer)), "no_answer": len(set(no_answer)), "queries": len(res.example_ids), "iterations": res.consensus.iterations,
            "abstained_queries": int(res.consensus.abstained.sum()), "reliability": res.reliability,
            "config": res.consensus.config.__dict__, "truth": str(truth) if truth else None, "agreement": agreement,
            "seconds": round(seconds, 2)}
    meta_path = run / "labels_consensus.json"
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return ConsensusRun(path, meta_path, res, agreement, seconds)
