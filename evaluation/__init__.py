"""Evaluation stage: what the pipeline's artifacts are worth, measured on held-out data.

- `jobs/`: the end-to-end drivers (`reproduce`: ingest → labels → router → report; `learn`, `loop`; find_tools'
  recall through a served MCP gateway, `mcp_recall`).
- `offline/`: held-out metrics, bootstrap intervals, baselines, the category prior, λ curves, the consensus-fit
  rows, the test–retest check and the session-routing cost simulation.
- `report/`: the oracle-gap report of a run (`switchcraft evaluate`).
- `tools/`: the tool-routing evaluation family (`switchcraft tools …`).
- `bench/`: the benchmarks (`switchcraft bench …`): speed and memory.
- `harness.py` (free ports, servers on loopback, Redis, a browser) and `synthetic_log.py` (a decision log for the
  console's bench and tests): what tests and benches share.
"""
