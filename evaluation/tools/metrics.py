"""Ranking metrics for tool retrieval: Recall@K, Comprehensiveness@K, NDCG@K.

Relevance is binary: a tool is needed by the query or not. Comprehensiveness@K
is 1 when every needed tool is in the top K (the agent can finish without
asking for more), else 0.

    from evaluation.tools.metrics import recall_at, comprehensive_at, ndcg_at
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def recall_at(ranked: Sequence[str], needed: Sequence[str], k: int) -> float:
    if not needed:
        raise ValueError("a query with no needed tool has no recall")
    top = set(ranked[:k])
    return sum(1 for t in set(needed) if t in top) / len(set(needed))


def comprehensive_at(ranked: Sequence[str], needed: Sequence[str], k: int) -> float:
    return float(set(needed) <= set(ranked[:k]))


def ndcg_at(ranked: Sequence[str], needed: Sequence[str], k: int = 10) -> float:
    rel = set(needed)
    dcg = sum(1.0 / math.log2(i + 2) for i, t in enumerate(ranked[:k]) if t in rel)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), k)))
    return dcg / ideal
