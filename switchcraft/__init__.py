"""switchcraft: route tool-calling requests to the cheapest model predicted to get them exactly right.

Quick start (Python):

    from data.config import load_data_config
    from data.ingest import ingest
    result = ingest(load_data_config(), ["bfcl_v1"], out="runs/default/examples.parquet")
"""

__version__ = "0.1.0"
