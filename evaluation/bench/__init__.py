"""The benchmarks, speed and memory, behind `switchcraft bench …` (switchcraft/cli_bench.py), each opening with its
command; `bench sessions`, `mcp-recall` and `loop` price or score instead: evaluation/offline/, evaluation/jobs/.
The `_`-prefixed modules are what the benchmarks share."""
