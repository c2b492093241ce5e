"""Bipartite matching for order-free comparisons (parallel calls, array elements).

First-fit is wrong when one output could match several expected items: with
expected {a: [1, 2]}, {a: [1]} and outputs a=1, a=2, first-fit pairs a=1 with
the first and then fails; an augmenting path moves it. Sizes here are small
(a handful of calls, arrays of tens), so Kuhn's O(V·E) algorithm is plenty.

    from data.verify.matching import max_matching
    max_matching([[True, True], [True, False]])  # [1, 0]: row 0 -> col 1, row 1 -> col 0
"""

from __future__ import annotations


def max_matching(ok: list[list[bool]]) -> list[int]:
    """For each row, the column it is matched to (-1: unmatched), maximising matched rows."""
    n_rows = len(ok)
    n_cols = len(ok[0]) if ok else 0
    owner = [-1] * n_cols

    def place(r: int, seen: list[bool]) -> bool:
        for c in range(n_cols):
            if ok[r][c] and not seen[c]:
                seen[c] = True
                if owner[c] < 0 or place(owner[c], seen):
                    owner[c] = r
                    return True
        return False

    for r in range(n_rows):
        place(r, [False] * n_cols)
    row_to_col = [-1] * n_rows
    for c, r in enumerate(owner):
        if r >= 0:
            row_to_col[r] = c
    return row_to_col


def has_perfect_matching(ok: list[list[bool]]) -> bool:
    """Square `ok`: can every row take its own column?"""
    if len(ok) != (len(ok[0]) if ok else 0):
        return False
    # Cheap necessary checks first: a row or column with no candidate settles it.
    if not all(any(row) for row in ok) or not all(any(col) for col in zip(*ok)):
        return False
    return -1 not in max_matching(ok)
