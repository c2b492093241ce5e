"""Markdown tables for the reports: a DataFrame as a pipe table, numbers at report precision.

    from evaluation.offline.markdown import markdown_table
    markdown_table(df)   # floats ≥ 100 as 1,234.57, others as 0.913; NaN and None as empty cells

pandas' `to_markdown` needs tabulate; this needs nothing. The oracle-gap report and the test–retest check
write their tables with it.
"""

from __future__ import annotations

import math

import pandas as pd


def markdown_table(df: pd.DataFrame) -> str:
    """A markdown table of `df`'s columns and rows (the index is not written)."""
    def fmt(v):
        if isinstance(v, float):
            return "" if math.isnan(v) else (f"{v:,.2f}" if abs(v) >= 100 else f"{v:.3f}")
        return "" if v is None else str(v)

    head = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in df.itertuples(index=False))
