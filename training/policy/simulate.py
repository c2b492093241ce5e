"""Strategies run on the recordings: what every single model and every agreement cascade would have done.

    from training.policy.simulate import CascadeData, menu_of, simulate
    cd = CascadeData.from_outputs(outputs, examples, pool, data)     # data: labels as matrices (a RoutingData)
    specs = menu_of(len(data.models))                                # every single and cascade over the pool
    out = simulate(cd, specs, costs)                                 # per query × spec: correct, cost, latency, calls

A spec is `(a, b, t, e)` column indices: `a == b` and `t is None` is single(a); otherwise agree(a, b[, t] → e).
A fifth element, `(a, b, t, e, tol)`, adds resolve rules: per kind of disagreement, on the `fit_rows` given to
`simulate` (training rows only), the cheapest of answering with a, with b, escalating past t, or going on by
the rules, whose accuracy on the rows of that kind is within `tol` of the best of them; kinds with fewer than
MIN_RULE_ROWS such rows keep no rule.

The simulation decides nothing itself: each strategy's kind runs it (`training.policy.kinds`: `run_rows` asks
`simulate` of the kind, which the agreement vectorises over rows and any other kind walks row by row,
`training.policy.kinds.walk_rows`). Cost is every call made; latency the slowest of the first step, plus each
later call; accuracy is the returned answer's label. "Cheaper" is by `costs`, the profiled mean cost per query
(the training folds'), as the gateway does with the decision's costs.

Agreement is `data.verify.agree.calls_agree` over the recorded decoded calls, with the labelling rule that a
native function-calling model's text is no call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
from rich.progress import track

from data.pool import Pool
from data.schema import Example, Output
from data.verify import language_of
from data.verify.agree import DISAGREEMENT_KINDS, calls_agree, disagreement_kind, effective_calls
from data.verify.batch import is_text
from training.policy.kinds import kind_of
from training.policy.strategy import RESOLVE_ACTIONS, Strategy

Spec = tuple  # (a, b, t | None, e) or (a, b, t | None, e, tol): see the module's docstring
MIN_RULE_ROWS = 10  # training rows of one disagreement kind before a rule for it may be fitted
RULE_TOLERANCES = (0.0, 0.02)  # the resolve-rule variants of every agreement on the menu
MIRROR = {"first_declines": "second_declines", "second_declines": "first_declines"}  # a kind from the other side


class Labelled(Protocol):
    """Aligned (queries × models) label matrices (`evaluation.offline.routing_eval.RoutingData` is one)."""

    example_ids: list[str]
    models: list[str]
    correct: np.ndarray  # bool, n × m
    cost: np.ndarray  # USD, n × m
    folds: np.ndarray  # int, n

    def subset(self, rows: np.ndarray) -> Labelled: ...


@dataclass
class CascadeData:
    """Labels plus what cascades need: pairwise agreement, whether each answer makes a call, recorded latency,
    same rows and columns."""

    data: Labelled
    agree: np.ndarray  # bool, n × m × m (symmetric, True on the diagonal)
    latency: np.ndarray  # seconds, n × m; NaN where not recorded
    latency_known: dict[str, int]  # model -> rows with a recorded latency
    kinds: np.ndarray | None = None  # int8, n × m × m: 0 where the pair agrees, else 1 + DISAGREEMENT_KINDS index
    called: np.ndarray | None = None  # bool, n × m: the model's answer makes a tool call

    @classmethod
    def from_outputs(cls, outputs: Sequence[Output], examples: Mapping[str, Example], pool: Pool, data: Labelled,
                     *, progress: bool = False) -> CascadeData:
        by_recording = {m.recording: m for m in pool.models} | {m.name: m for m in pool.models}
        col = {name: j for j, name in enumerate(data.models)}
        row = {e: i for i, e in enumerate(data.example_ids)}
        n, m = len(data.example_ids), len(data.models)
        calls: list[list[list | None]] = [[None] * m for _ in range(n)]
        latency = np.full((n, m), np.nan)
        for o in outputs:
            pm = by_recording.get(o.model)
            if pm is None or pm.name not in col or o.example_id not in row:
                continue
            i, j = row[o.example_id], col[pm.name]
            native_text = pm.prompt_style == "native" and is_text(o.raw)
            calls[i][j] = effective_calls(o.calls, o.decode_error, native_text=native_text)
            if o.latency_s is not None:
                latency[i, j] = o.latency_s
        missing = [(data.example_ids[i], data.models[j]) for i in range(n) for j in range(m) if calls[i][j] is None]
        if missing:
            raise ValueError(f"{len(missing)} (example, model) pairs have a label but no recorded output, e.g. {missing[:3]}; "
                             "pass the outputs the labels were made from")
        agree = np.zeros((n, m, m), dtype=bool)
        kinds = np.zeros((n, m, m), dtype=np.int8)
        code = {k: i + 1 for i, k in enumerate(DISAGREEMENT_KINDS)}
        rows = track(range(n), description="agreement checks", disable=not progress)
        for i in rows:
            ex = examples[data.example_ids[i]]
            lang = language_of(ex)
            agree[i, range(m), range(m)] = True
            keys = [answer_key(c) for c in calls[i]]
            seen: dict[tuple, tuple[bool, int]] = {}  # models often answer alike: each distinct pair checked once
            for a, b in itertools.combinations(range(m), 2):
                pair = (keys[a], keys[b])
                if pair not in seen:
                    ok = calls_agree(ex.tools, calls[i][a], calls[i][b], language=lang)
                    seen[pair] = ok, (0 if ok else code[disagreement_kind(ex.tools, calls[i][a], calls[i][b],
                                                                          language=lang)])
                ok, k = seen[pair]
                agree[i, a, b] = agree[i, b, a] = ok
                if not ok:  # from b's side the same kind, with first and second swapped
                    kind = DISAGREEMENT_KINDS[k - 1]
                    kinds[i, a, b], kinds[i, b, a] = k, code[MIRROR.get(kind, kind)]
        known = {name: int((~np.isnan(latency[:, j])).sum()) for j, name in enumerate(data.models)}
        called = np.array([[bool(c) for c in row] for row in calls], dtype=bool).reshape(n, m)
        return cls(data, agree, latency, known, kinds, called)

    def subset(self, rows: np.ndarray) -> CascadeData:
        return CascadeData(self.data.subset(rows), self.agree[rows], self.latency[rows], self.latency_known,
                           None if self.kinds is None else self.kinds[rows],
                           None if self.called is None else self.called[rows])


def answer_key(calls) -> tuple:
    """A hashable key equal for two answers exactly when they are the same calls with the same argument values
    and types (1, 1.0 and True differ): what `calls_agree` and `disagreement_kind` see of an answer."""
    def key(v):
        if isinstance(v, dict):
            return ("d", tuple(sorted((str(k), key(x)) for k, x in v.items())))
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(key(x) for x in v))
        if hasattr(v, "name") and hasattr(v, "arguments"):  # a Call
            return ("call", str(v.name), key(dict(v.arguments)))
        return (type(v).__name__, v if isinstance(v, (str, int, float, bool, type(None))) else repr(v))

    return (type(calls).__name__, key(list(calls or [])))


def menu_of(m: int, *, tie_breakers: bool = True, rules: Sequence[float] = (),
            among: Sequence[int] | None = None) -> list[Spec]:
    """Every single model and every agree(a, b[, t] → e) over m models (a < b; e any model, t any other);
    with `rules`, each agreement again with resolve rules fitted at each tolerance. `among`: the columns the
    agreements are built from (default all; every model stays on the menu as a single)."""
    specs: list[Spec] = [(j, j, None, j) for j in range(m)]
    pool = sorted(set(range(m) if among is None else among))
    for a, b in itertools.combinations(pool, 2):
        for e in pool:
            for t in [None, *(t for t in pool if t not in (a, b, e) and tie_breakers)]:
                specs.append((a, b, t, e))
                specs += [(a, b, t, e, tol) for tol in rules]
    return specs


def unpack(spec: Spec) -> tuple[int, int, int | None, int, float | None]:
    a, b, t, e, *rest = spec
    return a, b, t, e, (rest[0] if rest else None)


def to_strategy(spec: Spec, models: Sequence[str], rule: dict[str, str] | None = None) -> Strategy:
    """The Strategy a spec stands for, over `models` (column names), with its fitted resolve rule."""
    a, b, t, e, _ = unpack(spec)
    if a == b:
        return Strategy.single(models[a])
    return Strategy.agree(models[a], models[b], tie_breaker=None if t is None else models[t], escalate=(models[e],),
                          resolve=rule)


def spec_name(spec: Spec, models: Sequence[str], rule: dict[str, str] | None = None) -> str:
    return to_strategy(spec, models, rule).name


@dataclass
class Simulated:
    """Per query × spec: what running that strategy would have returned and paid."""

    correct: np.ndarray  # bool, n × s
    cost: np.ndarray  # USD, n × s
    latency: np.ndarray  # seconds, n × s (NaN where a called model's latency is unknown)
    calls: np.ndarray  # int, n × s
    escalated: np.ndarray  # bool, n × s: the first models disagreed (the tie-breaker or e was asked)
    rules: dict[int, dict[str, str]] = field(default_factory=dict)  # spec index -> its fitted resolve rule
    specs: list[Spec] = field(default_factory=list)  # the specs the columns stand for


Run = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # correct, cost, latency, calls, escalated


def run_rows(cd: CascadeData, strategy: Strategy, price: Mapping[str, float], memo: dict | None = None) -> Run:
    """`strategy` on every row of `cd`, as its kind simulates it (`StrategyKind.simulate`): per row whether the
    returned answer is right, the cost of every call, the latency, the calls made and whether it escalated."""
    return kind_of(strategy).simulate(cd, strategy, price, memo)


def simulate(cd: CascadeData, specs: Sequence[Spec], costs: np.ndarray, *,
             fit_rows: np.ndarray | None = None) -> Simulated:
    """Run every spec on every row of `cd`, "cheaper" by `costs` (one per model). Specs with resolve rules fit
    them on `fit_rows` (required for them: the training rows, never the rows being scored)."""
    models = cd.data.models
    price = dict(zip(models, np.asarray(costs, dtype=float).tolist()))
    n, s = len(cd.data.correct), len(specs)
    out = Simulated(np.zeros((n, s), bool), np.zeros((n, s)), np.zeros((n, s)), np.zeros((n, s), int),
                    np.zeros((n, s), bool), specs=list(specs))
    runs: dict[Strategy, Run] = {}  # the runs of the current agreement's variants (its rules share them)
    memo: dict = {}  # what kinds reuse across the menu (the agreement's row cases per a, b, t)

    def run(st: Strategy) -> Run:
        if st not in runs:
            runs[st] = run_rows(cd, st, price, memo)
        return runs[st]

    last = None
    for k, spec in enumerate(specs):
        strategy = to_strategy(spec, models)
        if spec[:4] != last:
            runs.clear()
            last = spec[:4]
        a, b, _, _, tol = unpack(spec)
        if tol is not None and a != b:  # an agreement of the menu, its resolve rules fitted
            rule = fit_rule(cd, strategy, fit_rows, tol, run)
            out.rules[k] = rule
            strategy = replace(strategy, resolve=tuple(rule.items()))
        out.correct[:, k], out.cost[:, k], out.latency[:, k], out.calls[:, k], out.escalated[:, k] = run(strategy)
    return out


def fit_rule(cd: CascadeData, strategy: Strategy, fit_rows: np.ndarray | None, tol: float,
             run: Callable[[Strategy], Run]) -> dict[str, str]:
    """Per disagreement kind, on `fit_rows`: the cheapest way out whose accuracy is within `tol` of the best
    way's (going on to the tie-breaker / escalation included); no rule where going on is that way. Each way is
    `strategy` run with that action as the rule for every kind, read on the rows of the kind."""
    if cd.kinds is None:
        raise ValueError("resolve rules need the kinds of disagreement: build CascadeData with from_outputs")
    if fit_rows is None:
        raise ValueError("resolve rules are fitted on training rows: pass fit_rows to simulate")
    col = {m: j for j, m in enumerate(cd.data.models)}
    a, b = col[strategy.first[0]], col[strategy.first[1]]
    rows = np.asarray(fit_rows)
    rows = rows[~cd.agree[rows, a, b]]
    actions = [x for x in RESOLVE_ACTIONS if not (x == "escalate" and strategy.tie_breaker is None)]
    ways = {"continue": run(strategy)}
    ways |= {x: run(replace(strategy, resolve=tuple((kind, x) for kind in DISAGREEMENT_KINDS))) for x in actions}
    rule: dict[str, str] = {}
    for code, kind in enumerate(DISAGREEMENT_KINDS, start=1):
        r = rows[cd.kinds[rows, a, b] == code]
        if len(r) < MIN_RULE_ROWS:
            continue
        options = [(name, w[0][r].mean(), w[1][r].mean()) for name, w in ways.items()]
        best = max(acc for _, acc, _ in options)
        name = min((o for o in options if o[1] >= best - tol - 1e-12), key=lambda o: (o[2], -o[1]))[0]
        if name != "continue":
            rule[kind] = name
    return rule


def pareto_menu(sim: Simulated, rows: np.ndarray, *, limit: int | None = None, slack: float = 0.0) -> list[int]:
    """Specs on the (mean cost, accuracy) frontier over `rows`, cheapest first: nothing else is worth choosing
    on average. `slack` > 0 also keeps those within `slack` accuracy of the frontier at their cost (a strategy
    a little worse on average can be the best for some requests)."""
    acc = sim.correct[rows].mean(axis=0)
    cost = sim.cost[rows].mean(axis=0)
    keep: list[int] = []
    best = -1.0
    for k in np.lexsort((-acc, cost)):
        if acc[k] > best - slack + 1e-12:
            keep.append(int(k))
        best = max(best, acc[k])
    if limit is not None and len(keep) > limit:
        # Evenly spaced along the frontier, both ends kept.
        keep = [keep[int(round(i))] for i in np.linspace(0, len(keep) - 1, limit)]
    return keep
