"""Strategies scored on the recordings: what every single model and every agreement cascade would have done.

    from evaluation.strategies import CascadeData, menu_of, simulate
    cd = CascadeData.from_outputs(outputs, examples, pool, data)     # data: a RoutingData
    specs = menu_of(len(data.models))                                # every single and cascade over the pool
    out = simulate(cd, specs, costs)                                 # per query × spec: correct, cost, latency, calls

A spec is `(a, b, t, e)` column indices: `a == b` and `t is None` is single(a);
otherwise agree(a, b[, t] → e), run as `serving.strategy` says: a and b together
(latency: the slower), the cheaper answers when they agree; else the
tie-breaker t (latency added), whose agreement with a or b answers with the
cheaper of that pair (with both: the cheapest of the three); else e (latency added; no new call when e is a or b).
A fifth element, `(a, b, t, e, tol)`, adds resolve rules (`serving.strategy`):
per kind of disagreement, on the `fit_rows` given to `simulate` (training rows
only), the cheapest of answering with a, with b, escalating past t, or going
on as above whose accuracy on the rows of that kind is within `tol` of the
best of them; kinds with fewer than MIN_RULE_ROWS such rows keep no rule.
Cost is every call made; accuracy is the returned answer's label. "Cheaper" is
by `costs`, the profiled mean cost per query (the training folds'), as the
gateway does with the decision's costs.

Agreement is `data.verify.agree.calls_agree` over the recorded decoded calls,
with the labelling rule that a native function-calling model's text is no call.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from rich.progress import track

from data.pool import Pool
from data.schema import Example, Output
from data.verify import language_of
from data.verify.agree import DISAGREEMENT_KINDS, calls_agree, disagreement_kind, effective_calls
from data.verify.batch import is_text
from evaluation.routing_eval import RoutingData

Spec = tuple  # (a, b, t | None, e) or (a, b, t | None, e, tol): see the module's docstring
MIN_RULE_ROWS = 10  # training rows of one disagreement kind before a rule for it may be fitted
RULE_TOLERANCES = (0.0, 0.02)  # the resolve-rule variants of every agreement on the menu
MIRROR = {"first_declines": "second_declines", "second_declines": "first_declines"}  # a kind from the other side


@dataclass
class CascadeData:
    """RoutingData plus what cascades need: pairwise agreement and recorded latency, same rows and columns."""

    data: RoutingData
    agree: np.ndarray  # bool, n × m × m (symmetric, True on the diagonal)
    latency: np.ndarray  # seconds, n × m; NaN where not recorded
    latency_known: dict[str, int]  # model -> rows with a recorded latency
    kinds: np.ndarray | None = None  # int8, n × m × m: 0 where the pair agrees, else 1 + DISAGREEMENT_KINDS index

    @classmethod
    def from_outputs(cls, outputs: Sequence[Output], examples: Mapping[str, Example], pool: Pool, data: RoutingData,
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
            for a, b in itertools.combinations(range(m), 2):
                agree[i, a, b] = agree[i, b, a] = calls_agree(ex.tools, calls[i][a], calls[i][b], language=lang)
                if not agree[i, a, b]:  # from b's side the same kind, with first and second swapped
                    kind = disagreement_kind(ex.tools, calls[i][a], calls[i][b], language=lang)
                    kinds[i, a, b], kinds[i, b, a] = code[kind], code[MIRROR.get(kind, kind)]
        known = {name: int((~np.isnan(latency[:, j])).sum()) for j, name in enumerate(data.models)}
        return cls(data, agree, latency, known, kinds)

    def subset(self, rows: np.ndarray) -> CascadeData:
        return CascadeData(self.data.subset(rows), self.agree[rows], self.latency[rows], self.latency_known,
                           None if self.kinds is None else self.kinds[rows])


def menu_of(m: int, *, tie_breakers: bool = True, rules: Sequence[float] = ()) -> list[Spec]:
    """Every single model and every agree(a, b[, t] → e) over m models (a < b; e any model, t any other);
    with `rules`, each agreement again with resolve rules fitted at each tolerance."""
    specs: list[Spec] = [(j, j, None, j) for j in range(m)]
    for a, b in itertools.combinations(range(m), 2):
        for e in range(m):
            for t in [None, *(t for t in range(m) if t not in (a, b, e) and tie_breakers)]:
                specs.append((a, b, t, e))
                specs += [(a, b, t, e, tol) for tol in rules]
    return specs


def unpack(spec: Spec) -> tuple[int, int, int | None, int, float | None]:
    a, b, t, e, *rest = spec
    return a, b, t, e, (rest[0] if rest else None)


@dataclass
class Simulated:
    """Per query × spec: what running that strategy would have returned and paid."""

    correct: np.ndarray  # bool, n × s
    cost: np.ndarray  # USD, n × s
    latency: np.ndarray  # seconds, n × s (NaN where a called model's latency is unknown)
    calls: np.ndarray  # int, n × s
    escalated: np.ndarray  # bool, n × s: the first models disagreed (the tie-breaker or e was asked)
    rules: dict[int, dict[str, str]] = field(default_factory=dict)  # spec index -> its fitted resolve rule


def simulate(cd: CascadeData, specs: Sequence[Spec], costs: np.ndarray, *,
             fit_rows: np.ndarray | None = None) -> Simulated:
    """Run every spec on every row of `cd` (vectorised over rows). Specs with resolve rules fit them on
    `fit_rows` (required for them: the training rows, never the rows being scored)."""
    correct, cost, lat = cd.data.correct, cd.data.cost, cd.latency
    n, s = len(correct), len(specs)
    out = Simulated(np.zeros((n, s), bool), np.zeros((n, s)), np.zeros((n, s)), np.zeros((n, s), int), np.zeros((n, s), bool))
    for k, spec in enumerate(specs):
        a, b, t, e, tol = unpack(spec)
        if a == b:
            out.correct[:, k], out.cost[:, k], out.latency[:, k], out.calls[:, k] = correct[:, a], cost[:, a], lat[:, a], 1
            continue
        lo = a if costs[a] <= costs[b] else b
        agreed = cd.agree[:, a, b]
        done = agreed.copy()
        ok = np.where(done, correct[:, lo], False)
        paid0 = cost[:, a] + cost[:, b]
        wait0 = np.maximum(lat[:, a], lat[:, b])
        paid, wait, calls = paid0.copy(), wait0.copy(), np.full(n, 2)
        if t is not None:
            asked = ~done
            paid = paid + np.where(asked, cost[:, t], 0.0)
            wait = wait + np.where(asked, lat[:, t], 0.0)
            calls = calls + asked
            side_a, side_b = asked & cd.agree[:, t, a], asked & cd.agree[:, t, b]
            pick_a = a if costs[a] <= costs[t] else t
            pick_b = b if costs[b] <= costs[t] else t
            pick_both = pick_a if costs[pick_a] <= costs[pick_b] else pick_b  # the gateway's order on ties
            ok = np.where(side_a & ~side_b, correct[:, pick_a], ok)
            ok = np.where(side_b & ~side_a, correct[:, pick_b], ok)
            ok = np.where(side_a & side_b, correct[:, pick_both], ok)
            done = done | side_a | side_b
        rest = ~done
        new_e = e not in (a, b, t)
        if new_e:
            paid = paid + np.where(rest, cost[:, e], 0.0)
            wait = wait + np.where(rest, lat[:, e], 0.0)
            calls = calls + rest
        ok = np.where(rest, correct[:, e], ok)
        escalated = ~agreed
        if tol is not None:
            # The other ways out of a disagreement, per row: answer with a, with b, or ask e at once.
            skip_paid = paid0 + (cost[:, e] if e not in (a, b) else 0.0)
            ways = {"first": (correct[:, a], paid0, wait0, 2), "second": (correct[:, b], paid0, wait0, 2),
                    "escalate": (correct[:, e], skip_paid, wait0 + (lat[:, e] if e not in (a, b) else 0.0),
                                 2 + (e not in (a, b)))}
            rule = fit_rule(cd, a, b, t, fit_rows, tol, ok, paid, ways)
            out.rules[k] = rule
            for kind, action in rule.items():
                here = ~agreed & (cd.kinds[:, a, b] == DISAGREEMENT_KINDS.index(kind) + 1)
                w_ok, w_paid, w_wait, w_calls = ways[action]
                ok, paid = np.where(here, w_ok, ok), np.where(here, w_paid, paid)
                wait, calls = np.where(here, w_wait, wait), np.where(here, w_calls, calls)
                if action != "escalate":
                    escalated = escalated & ~here
        out.correct[:, k], out.cost[:, k], out.latency[:, k], out.calls[:, k], out.escalated[:, k] = ok, paid, wait, calls, escalated
    return out


def fit_rule(cd: CascadeData, a: int, b: int, t: int | None, fit_rows: np.ndarray | None, tol: float,
             ok: np.ndarray, paid: np.ndarray, ways: dict[str, tuple]) -> dict[str, str]:
    """Per disagreement kind, on `fit_rows`: the cheapest way out whose accuracy is within `tol` of the best
    way's (going on to the tie-breaker / escalation included); no rule where going on is that way."""
    if cd.kinds is None:
        raise ValueError("resolve rules need the kinds of disagreement: build CascadeData with from_outputs")
    if fit_rows is None:
        raise ValueError("resolve rules are fitted on training rows: pass fit_rows to simulate")
    rows = np.asarray(fit_rows)
    rows = rows[~cd.agree[rows, a, b]]
    rule: dict[str, str] = {}
    for code, kind in enumerate(DISAGREEMENT_KINDS, start=1):
        r = rows[cd.kinds[rows, a, b] == code]
        if len(r) < MIN_RULE_ROWS:
            continue
        options = [("continue", ok[r].mean(), paid[r].mean())]
        options += [(name, w[0][r].mean(), w[1][r].mean()) for name, w in ways.items()
                    if not (name == "escalate" and t is None)]
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


def spec_name(spec: Spec, models: Sequence[str], rule: dict[str, str] | None = None) -> str:
    a, b, t, e, _ = unpack(spec)
    if a == b:
        return f"single({models[a]})"
    tb = f", {models[t]}" if t is not None else ""
    ordered = [(k, rule[k]) for k in DISAGREEMENT_KINDS if k in (rule or {})]
    rules = "; " + ", ".join(f"{k}: {x}" for k, x in ordered) if ordered else ""
    return f"agree({models[a]}, {models[b]}{tb} → {models[e]}{rules})"
