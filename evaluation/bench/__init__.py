"""The benchmarks: each module times one part of the system and writes or prints a table.

Every one runs as a `switchcraft bench` subcommand (`switchcraft bench --help` lists them; each module's docstring
gives its command): `verify`, `pool`, `train`, `serve`, `long-input`, `router-ab`, `tools`, `gateway`, and `loop`
(the learning loop on replayed traffic, `evaluation/jobs/loop.py`).
"""
