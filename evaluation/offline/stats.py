"""95% bootstrap intervals over queries, paired with a reference row (the best single model).

    from evaluation.offline.stats import paired_bootstrap
    ci = paired_bootstrap({"router": (correct, cost), "best": (correct_b, cost_b)}, reference="best")
    ci["router"].accuracy, ci["router"].delta_accuracy, ci["router"].significant_accuracy

Every row is resampled with the same query indices as the reference (the rows
are routings of the same held-out queries), so a difference's interval
accounts for the correlation between them. Percentile intervals, fixed seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def text(self, fmt: str = "{:.3f}") -> str:
        return f"[{fmt.format(self.low)}, {fmt.format(self.high)}]"


@dataclass(frozen=True)
class RowIntervals:
    accuracy: Interval
    usd_per_million: Interval
    delta_accuracy: Interval  # row − reference
    delta_usd_per_million: Interval

    @property
    def significant_accuracy(self) -> bool:
        return self.delta_accuracy.excludes_zero()

    @property
    def significant_cost(self) -> bool:
        return self.delta_usd_per_million.excludes_zero()

    @property
    def reaches(self) -> bool:
        """Reaches the reference: accuracy not significantly below it and cost not significantly above it."""
        return bool(self.delta_accuracy.high >= 0 and self.delta_usd_per_million.low <= 0)

    def verdict(self) -> str:
        """One phrase for the headline: how the row differs from the reference, and whether it is significant."""
        acc = ("more accurate" if self.delta_accuracy.low > 0 else "less accurate") if self.significant_accuracy \
            else "accuracy n.s."
        cost = ("dearer" if self.delta_usd_per_million.low > 0 else "cheaper") if self.significant_cost else "cost n.s."
        return f"{acc}, {cost}"


def paired_bootstrap(rows: Mapping[str, tuple[np.ndarray, np.ndarray]], reference: str, *, resamples: int = RESAMPLES,
                     seed: int = 0, level: float = 0.95) -> dict[str, RowIntervals]:
    """Per row: percentile intervals of accuracy, $/M queries and their differences from `reference`."""
    if reference not in rows:
        raise ValueError(f"reference row {reference!r} is not among the rows {sorted(rows)}")
    n = len(rows[reference][0])
    bad = [k for k, (c, p) in rows.items() if len(c) != n or len(p) != n]
    if bad:
        raise ValueError(f"rows {bad} do not cover the same {n} queries as {reference!r}")
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]

    def means(v: np.ndarray) -> np.ndarray:
        return np.asarray(v, dtype=float)[idx].mean(axis=1)

    ref_acc, ref_cost = means(rows[reference][0]), means(rows[reference][1]) * 1e6
    out = {}
    for name, (correct, cost) in rows.items():
        acc, usd = means(correct), means(cost) * 1e6
        out[name] = RowIntervals(Interval(*np.percentile(acc, q)), Interval(*np.percentile(usd, q)),
                                 Interval(*np.percentile(acc - ref_acc, q)), Interval(*np.percentile(usd - ref_cost, q)))
    return out
