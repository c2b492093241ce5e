"""Per-model cost profile: list price against what a query really costs.

    switchcraft pool profile                    # all priced BFCL v1 models, from the real recordings
    switchcraft pool profile --recordings runs/x/pool_outputs.parquet --prices ../shared/data/bfcl_v1_prices_2024-08.json

List prices say little on their own: a model that answers a function call
with a paragraph of reasoning costs many times its price-sheet neighbour (the
paper's "conversationality"). For each model: list prices; mean input and
output tokens per call; real mean cost per query (recorded usage × prices);
the cost the price sheet implies for a reference query (the median input and
output tokens over every priced model's calls), and the ratio of the two;
the share of output tokens spent on reasoning where it was recorded.
Writes `cost_profile.md`, `cost_profile.csv` and `cost_profile.png`.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from data.errors import DataError
from data.pool import Prices
from data.replay.recordings import Recordings, read_recordings
from data.schema import Usage

Usages = dict[str, list[Usage]]  # model -> one Usage per recorded query


@dataclass
class ModelCost:
    model: str
    input_per_mtok: float
    output_per_mtok: float
    queries: int  # with recorded usage
    mean_input_tokens: float | None
    mean_output_tokens: float | None
    reasoning_share: float | None  # None: reasoning tokens not recorded
    real_usd_per_query: float | None
    list_usd_per_query: float  # at the reference query's tokens
    real_over_list: float | None


def read_usages(path: str | Path, models: list[str] | None = None) -> Usages:
    """Token counts per model from an outputs.parquet or a BFCL result directory.

    A result directory is read for its counts only (no decoding: 4x faster than
    importing), with the importer's own per-line reading (`data.recorded.row_usage`:
    turns summed, 0 input and 0 output tokens is "not measured").
    """
    path = Path(path)
    if not path.is_dir():
        return usages_of(read_recordings(path, models=models))
    from data.io import iter_jsonl
    from data.recorded import detect_layout, result_files, row_usage

    files = result_files(path, detect_layout(path))
    wanted = set(models) if models is not None else None
    out: Usages = {}
    for model, _, f in files:
        if wanted is not None and model not in wanted:
            continue
        rows = out.setdefault(model, [])
        for lineno, row in iter_jsonl(f):
            tin, tout = row_usage(row, f, lineno)
            rows.append(Usage(input_tokens=tin, output_tokens=tout))
    if wanted is not None and (missing := sorted(wanted - set(out))):
        raise DataError(f"no recordings for model(s) {missing}", path=path)
    return out


def usages_of(recordings: Recordings) -> Usages:
    return {m: [r.usage for r in rows.values()] for m, rows in recordings.items()}


def reference_usage(usages: Usages, priced: set[str]) -> Usage:
    known = [u for m, us in usages.items() if m in priced for u in us if u.known]
    ins, outs = [u.input_tokens for u in known], [u.output_tokens for u in known]
    if not ins:
        raise ValueError("no recording of a priced model has token counts; nothing to profile")
    return Usage(
        input_tokens=round(statistics.median(ins)), output_tokens=round(statistics.median(outs))
    )


def profile_costs(
    usages_by_model: Usages, prices: dict[str, Prices]
) -> tuple[list[ModelCost], Usage]:
    """One row per priced model (unrecorded ones too, with empty columns), sorted by real cost per query.

    Per-token prices only: the profile sets token usage against a price sheet.
    """
    per_other = sorted(m for m, p in prices.items() if p.kind != "token")
    if per_other:
        raise ValueError(f"a cost profile compares per-token prices with token usage; {per_other} are not "
                         "priced per token (their cost per query is their label cost: switchcraft label)")
    ref = reference_usage(usages_by_model, set(prices))
    rows = []
    for model, p in prices.items():
        usages = [u for u in usages_by_model.get(model, []) if u.known]
        list_cost = p.cost_usd(ref)
        if not usages:
            rows.append(
                ModelCost(
                    model,
                    p.input_per_mtok,
                    p.output_per_mtok,
                    0,
                    None,
                    None,
                    None,
                    None,
                    list_cost,
                    None,
                )
            )
            continue
        real = statistics.fmean(p.cost_usd(u) for u in usages)
        out_total = sum(u.output_tokens for u in usages)
        reasoning = [u.reasoning_tokens for u in usages if u.reasoning_tokens is not None]
        rows.append(
            ModelCost(
                model,
                p.input_per_mtok,
                p.output_per_mtok,
                len(usages),
                statistics.fmean(u.input_tokens for u in usages),
                statistics.fmean(u.output_tokens for u in usages),
                sum(reasoning) / out_total if reasoning and out_total else None,
                real,
                list_cost,
                real / list_cost if list_cost else None,
            )
        )
    rows.sort(key=lambda r: (r.real_usd_per_query is None, -(r.real_usd_per_query or 0)))
    return rows, ref


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def markdown_table(rows: list[ModelCost], ref: Usage) -> str:
    lines = [
        (
            f"Reference query: {ref.input_tokens} input + {ref.output_tokens} output tokens "
            "(medians over all priced models' recorded calls)."
        ),
        "",
        (
            "| # | model | $/Mtok in | $/Mtok out | queries | in tok/call | out tok/call | reasoning share "
            "| real $/query | list $/query (ref.) | real ÷ list |"
        ),
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"| {i} | {r.model} | {r.input_per_mtok:g} | {r.output_per_mtok:g} | {r.queries:,} "
            f"| {_fmt(r.mean_input_tokens, '.0f')} | {_fmt(r.mean_output_tokens, '.1f')} "
            f"| {_fmt(r.reasoning_share, '.1%') if r.queries else '—'} | {_fmt(r.real_usd_per_query, '.6f')} "
            f"| {r.list_usd_per_query:.6f} | {_fmt(r.real_over_list, '.2f')} |"
        )
    lines.append("")
    lines.append(
        "reasoning share: — means the recordings hold no reasoning-token counts (2024 models)."
    )
    return "\n".join(lines) + "\n"


def write_csv(rows: list[ModelCost], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
        w.writeheader()
        w.writerows(asdict(r) for r in rows)


def plot(rows: list[ModelCost], ref: Usage, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display here
    import matplotlib.pyplot as plt

    have = [r for r in rows if r.real_usd_per_query]
    fig, ax = plt.subplots(figsize=(10, 7.5))
    xs = [r.list_usd_per_query for r in have]
    ys = [r.real_usd_per_query for r in have]
    ax.scatter(xs, ys, c=[r.mean_output_tokens for r in have], cmap="viridis", s=30)
    lo, hi = min(xs + ys) / 1.5, max(xs + ys) * 1.5
    ax.plot(
        [lo, hi], [lo, hi], color="grey", lw=0.8, ls="--", label="real = list (reference query)"
    )
    for r in have:
        ax.annotate(
            r.model,
            (r.list_usd_per_query, r.real_usd_per_query),
            fontsize=6,
            alpha=0.8,
            xytext=(3, 2),
            textcoords="offset points",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel=f"list-price cost of a reference query ({ref.input_tokens} in / {ref.output_tokens} out tokens), USD",
        ylabel="real mean cost per query (recorded usage), USD",
        title="BFCL v1: list price vs real cost per query (colour: output tokens per call)",
    )
    ax.legend(loc="upper left")
    fig.colorbar(ax.collections[0], ax=ax, label="mean output tokens per call")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write_profile(rows: list[ModelCost], ref: Usage, out_dir: str | Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "md": out_dir / "cost_profile.md",
        "csv": out_dir / "cost_profile.csv",
        "png": out_dir / "cost_profile.png",
    }
    paths["md"].write_text(markdown_table(rows, ref))
    write_csv(rows, paths["csv"])
    plot(rows, ref, paths["png"])
    return paths
