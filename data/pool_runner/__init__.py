"""The pool runner: send benchmark examples to every model of the pool, resumably and within budget.

switchcraft pool run --pool configs/pool.yaml --examples runs/default/examples.parquet --max-usd 20
"""

from data.pool_runner.runner import RunSummary, run_pool, run_pool_async
from data.pool_runner.store import CallStore

__all__ = ["CallStore", "RunSummary", "run_pool", "run_pool_async"]
