"""The screen: what each recorded model outside a pool is worth to it with every true label.

    python -m evaluation.onboard --run-dir runs/cons_default --screen [--pool POOL.yaml] --out runs/screen.json

The truth arm of `evaluation.onboard` alone, for every priced recording in `<run_dir>/outputs.parquet` that is
not in the pool: the held-out value (accuracy gain within the given budget; $/M saved at best-single accuracy)
with its 95% interval. Which models are worth onboarding at all — before asking whether a few hundred
consensus-labelled requests find that worth (docs/onboarding.md).
"""

from __future__ import annotations

from evaluation.onboard import PoolState, describe, new_model, truth_arm, value_table


def outside_models(st: PoolState) -> list[str]:
    """The recorded models in `<run_dir>/outputs.parquet` that are not in the pool, sorted."""
    import pyarrow.parquet as pq

    names = set(pq.read_table(st.run_dir / "outputs.parquet", columns=["model"]).column("model").to_pylist())
    return sorted(names - {m.recording for m in st.pool.models} - set(st.pool.names))


def screen(st: PoolState, models: list[str], *, log=print) -> list[dict]:
    """The truth arm alone for each model: its held-out value to the pool with every true label, per target
    (with its 95% interval). Models without a price are listed with the reason and no value."""
    base = {"truth": st.baseline()["truth"]}
    out = []
    for model in models:
        try:
            cd9, _, entry = new_model(st, model)
        except ValueError as e:
            out.append({"model": model, "skipped": str(e)})
            log(f"{model}: skipped ({e})")
            continue
        values = value_table(base, {"truth": [truth_arm(st, cd9)]})["truth"]
        out.append({**describe(model, entry, cd9.data, len(st.pool.names)), "values": values})
        log(f"{model}: ≤ 20% {values['cost_fraction']['value']:+.4f} {values['cost_fraction']['value_ci']}, "
            f"best-single acc. {values['match_best']['value']:+.0f} $/M {values['match_best']['value_ci']}")
    return out


def screen_markdown(rows: list[dict]) -> list[str]:
    lines = ["| model (accuracy, $/M) | ≤ 20% budget: accuracy, $/M | accuracy gain [95% CI] | "
             "best-single acc.: accuracy, $/M | $/M saved [95% CI] |", "|---|---|---|---|---|"]
    for r in sorted((r for r in rows if "values" in r), key=lambda r: -r["values"]["cost_fraction"]["value"]):
        cells = []
        for t, fmt in (("cost_fraction", "{:+.4f}"), ("match_best", "{:+,.0f}")):
            x = r["values"][t]
            star = " *" if x["value_ci"][0] > 0 else ""
            cells += [f"{x['accuracy']:.3f}, {x['usd_per_million']:,.0f}",
                      f"{fmt.format(x['value'])} [{fmt.format(x['value_ci'][0])}, {fmt.format(x['value_ci'][1])}]{star}"]
        lines.append(f"| {r['model']} ({r['true_accuracy']:.3f}, {r['usd_per_million']:,.0f}) | " + " | ".join(cells) + " |")
    lines += [f"| {r['model']} | skipped: {r['skipped']} | | | |" for r in rows if "skipped" in r]
    return lines
