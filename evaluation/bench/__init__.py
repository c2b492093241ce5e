"""The benchmarks: one module per `switchcraft bench` subcommand (switchcraft/cli_bench.py), each opening with
its command; the `_`-prefixed modules are what they share."""
