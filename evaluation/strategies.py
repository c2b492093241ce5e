"""Strategies scored on the recordings: what every single model and every agreement cascade would have done.

    from evaluation.strategies import CascadeData, menu_of, simulate
    cd = CascadeData.from_outputs(outputs, examples, pool, data)     # data: a RoutingData
    specs = menu_of(len(data.models))                                # every single and cascade over the pool
    out = simulate(cd, specs, costs)                                 # per query × spec: correct, cost, latency, calls

A spec is `(a, b, t, e)` column indices: `a == b` and `t is None` is single(a);
otherwise agree(a, b[, t] → e), run as `serving.strategy` says: a and b together
(latency: the slower), the cheaper answers when they agree; else the
tie-breaker t (latency added), whose agreement with a or b answers with the
cheaper of that pair; else e (latency added; no new call when e is a or b).
Cost is every call made; accuracy is the returned answer's label. "Cheaper" is
by `costs`, the profiled mean cost per query (the training folds'), as the
gateway does with the decision's costs.

Agreement is `data.verify.agree.calls_agree` over the recorded decoded calls,
with the labelling rule that a native function-calling model's text is no call.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from rich.progress import track

from data.pool import Pool
from data.schema import Example, Output
from data.verify import language_of
from data.verify.agree import calls_agree, effective_calls
from data.verify.batch import is_text
from evaluation.routing_eval import RoutingData

Spec = tuple[int, int, int | None, int]


@dataclass
class CascadeData:
    """RoutingData plus what cascades need: pairwise agreement and recorded latency, same rows and columns."""

    data: RoutingData
    agree: np.ndarray  # bool, n × m × m (symmetric, True on the diagonal)
    latency: np.ndarray  # seconds, n × m; NaN where not recorded
    latency_known: dict[str, int]  # model -> rows with a recorded latency

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
        rows = track(range(n), description="agreement checks", disable=not progress)
        for i in rows:
            ex = examples[data.example_ids[i]]
            lang = language_of(ex)
            agree[i, range(m), range(m)] = True
            for a, b in itertools.combinations(range(m), 2):
                agree[i, a, b] = agree[i, b, a] = calls_agree(ex.tools, calls[i][a], calls[i][b], language=lang)
        known = {name: int((~np.isnan(latency[:, j])).sum()) for j, name in enumerate(data.models)}
        return cls(data, agree, latency, known)

    def subset(self, rows: np.ndarray) -> CascadeData:
        return CascadeData(self.data.subset(rows), self.agree[rows], self.latency[rows], self.latency_known)


def menu_of(m: int, *, tie_breakers: bool = True) -> list[Spec]:
    """Every single model and every agree(a, b[, t] → e) over m models (a < b; e any model, t any other)."""
    specs: list[Spec] = [(j, j, None, j) for j in range(m)]
    for a, b in itertools.combinations(range(m), 2):
        for e in range(m):
            specs.append((a, b, None, e))
            if tie_breakers:
                specs += [(a, b, t, e) for t in range(m) if t not in (a, b, e)]
    return specs


@dataclass
class Simulated:
    """Per query × spec: what running that strategy would have returned and paid."""

    correct: np.ndarray  # bool, n × s
    cost: np.ndarray  # USD, n × s
    latency: np.ndarray  # seconds, n × s (NaN where a called model's latency is unknown)
    calls: np.ndarray  # int, n × s
    escalated: np.ndarray  # bool, n × s: the first models disagreed (the tie-breaker or e was asked)


def simulate(cd: CascadeData, specs: Sequence[Spec], costs: np.ndarray) -> Simulated:
    """Run every spec on every row of `cd` (vectorised over rows)."""
    correct, cost, lat = cd.data.correct, cd.data.cost, cd.latency
    n, s = len(correct), len(specs)
    out = Simulated(np.zeros((n, s), bool), np.zeros((n, s)), np.zeros((n, s)), np.zeros((n, s), int), np.zeros((n, s), bool))
    for k, (a, b, t, e) in enumerate(specs):
        if a == b:
            out.correct[:, k], out.cost[:, k], out.latency[:, k], out.calls[:, k] = correct[:, a], cost[:, a], lat[:, a], 1
            continue
        lo = a if costs[a] <= costs[b] else b
        done = cd.agree[:, a, b].copy()
        ok = np.where(done, correct[:, lo], False)
        paid = cost[:, a] + cost[:, b]
        wait = np.maximum(lat[:, a], lat[:, b])
        calls = np.full(n, 2)
        escalated = ~done
        if t is not None:
            asked = ~done
            paid = paid + np.where(asked, cost[:, t], 0.0)
            wait = wait + np.where(asked, lat[:, t], 0.0)
            calls = calls + asked
            with_a, with_b = asked & cd.agree[:, t, a], asked & ~cd.agree[:, t, a] & cd.agree[:, t, b]
            pick_a = a if costs[a] <= costs[t] else t
            pick_b = b if costs[b] <= costs[t] else t
            ok = np.where(with_a, correct[:, pick_a], ok)
            ok = np.where(with_b, correct[:, pick_b], ok)
            done = done | with_a | with_b
        rest = ~done
        if e not in (a, b, t):
            paid = paid + np.where(rest, cost[:, e], 0.0)
            wait = wait + np.where(rest, lat[:, e], 0.0)
            calls = calls + rest
        ok = np.where(rest, correct[:, e], ok)
        out.correct[:, k], out.cost[:, k], out.latency[:, k], out.calls[:, k], out.escalated[:, k] = ok, paid, wait, calls, escalated
    return out


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


def spec_name(spec: Spec, models: Sequence[str]) -> str:
    a, b, t, e = spec
    if a == b:
        return f"single({models[a]})"
    tb = f", {models[t]}" if t is not None else ""
    return f"agree({models[a]}, {models[b]}{tb} → {models[e]})"
