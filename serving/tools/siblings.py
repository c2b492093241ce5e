"""Sibling fill: when the best tools are endpoints of one service, give their sibling endpoints the next places.

On a catalog whose namespace is one service (a RapidAPI tool's endpoints, an
MCP server's tools), a request that needs one endpoint of a service often needs
another one of it too, phrased in words that do not match it
(`suivi-colis.Latest` shown, `suivi-colis.Count` missed). Of the K places, the
first `ceil(head × K)` stay in score order; the next go to the other tools of
those cards' namespaces, best first; any left to the rest in score order.
Where a namespace is a topic (`math.`, `geometry.` in BFCL) it costs recall,
so it is a per-catalog setting (`retrieval.sibling_fill` in `configs/tools.yaml`,
per benchmark catalog under `catalog_retrieval:`; chosen on training queries by
`switchcraft tools fit-fusion`).

    from serving.tools.siblings import namespace_ids, sibling_top
    ns = namespace_ids(cards, ["*"])                  # -1: a card without siblings
    top = sibling_top(fused, ns, head=0.5, k=10)
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import numpy as np

from serving.tools.index import top_k


def namespace_ids(cards, patterns: list[str]) -> np.ndarray:
    """Per card, an id shared by the cards of one namespace that matches one of `patterns` (fnmatch);
    -1 for a card with no namespace or one no pattern matches (it has no siblings)."""
    ids: dict[str, int] = {}
    out = np.full(len(cards), -1, dtype=np.int64)
    for i, c in enumerate(cards):
        ns = c.namespace
        if ns and any(fnmatchcase(ns, p) for p in patterns):
            out[i] = ids.setdefault(ns, len(ids))
    return out


def head_size(head: float, k: int) -> int:
    """Places kept in score order: ceil(head × k), at least 1."""
    return max(1, math.ceil(head * k - 1e-9))


def sibling_top(fused: np.ndarray, ns_ids: np.ndarray, head: float, k: int) -> np.ndarray:
    """The k cards shown under sibling fill (best first; -inf scores are never shown).

    The best `head_size(head, k)` cards by `fused`; then the other cards of their
    namespaces (those with an id ≥ 0), best first; then the rest by score.
    """
    h = head_size(head, k)
    first = top_k(fused, k)
    if h >= k or first.size <= h:
        return first
    first = first[:h]
    spaces = np.unique(ns_ids[first])
    spaces = spaces[spaces >= 0]
    if spaces.size == 0:
        return top_k(fused, k)
    sib = np.isin(ns_ids, spaces)
    sib[first] = False
    picked = top_k(np.where(sib, fused, -np.inf), k - h)
    out = np.concatenate([first, picked])
    if out.size < k:
        rest = fused.copy()
        rest[out] = -np.inf
        out = np.concatenate([out, top_k(rest, k - out.size)])
    return out


def ranking(fused: np.ndarray, ns_ids: np.ndarray | None, head: float | None, n: int, k: int) -> np.ndarray:
    """n cards, best first: the first k by sibling fill (as the router would expose k), the rest by score.
    `head` None (or no namespaces): plain score order."""
    if head is None or ns_ids is None or n <= 0:
        return top_k(fused, n)
    first = sibling_top(fused, ns_ids, head, min(k, n))
    if first.size >= n:
        return first[:n]
    rest = fused.copy()
    rest[first] = -np.inf
    return np.concatenate([first, top_k(rest, n - first.size)])
