"""Evaluation stage: what the pipeline's artifacts are worth, measured on held-out data.

- `jobs/`: the end-to-end drivers (`reproduce`: ingest → labels → router → report; `learn`, `loop`).
- `offline/`: held-out metrics, bootstrap intervals, baselines, the category prior, λ curves, the consensus-fit
  rows and the test–retest check.
- `report/`: the oracle-gap report of a run (`switchcraft evaluate`).
- `tools/`: the tool-routing evaluation family (`switchcraft tools …`).
- `bench/`: the benchmarks (`switchcraft bench …`).
"""
