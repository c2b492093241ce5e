"""Benchmarks with recorded model outputs: one adapter module each, in a registry keyed by name.

    from data.benchmarks import detect, get, names
    names()                                   # ['bfcl_v1', 'bfcl_v3', 'bfcl_v4', 'nexusbench']
    bench = get("nexusbench")                 # an unknown name: a DataError listing the known ones
    detect("../shared/data/bfcl_v4_outputs")  # the benchmark whose recordings a folder holds

An adapter is a module here with a subclass of `Benchmark` (`base.py`; `lines.ResultLines` for BFCL-style
result lines) decorated with `@register`: its name, its questions' ingest source, its recordings' folder under
the data root and how to read them, its harness's labels if the harness judged the answers. Everyone who needs
to know about a benchmark (`data.pool`'s `benchmark:`, `data.recorded`, `data.labels`, `switchcraft reproduce`,
`switchcraft import-outputs`) asks this registry; adding a benchmark is adding a module.
"""

from __future__ import annotations

from pathlib import Path

from data.benchmarks.base import Benchmark
from data.errors import DataError
from data.registry import Registry, UnknownNameError, import_modules

BENCHMARKS: Registry[Benchmark] = Registry("benchmark")
_NOT_ADAPTERS = {"base", "lines"}  # the modules here that every adapter builds on


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: register one instance of the benchmark under its `name` (a duplicate name raises)."""
    BENCHMARKS.add(cls.name, cls())
    return cls


def load() -> Registry[Benchmark]:
    """Import every adapter module (each registers itself) and return the registry."""
    import_modules(__name__, _NOT_ADAPTERS)
    return BENCHMARKS


def names() -> list[str]:
    """Every registered benchmark's name, sorted."""
    return sorted(load().names())


def get(name: str) -> Benchmark:
    """The benchmark registered as `name`; a DataError naming the known ones for any other."""
    try:
        return load().get(name)
    except UnknownNameError as e:
        raise DataError(str(e), hint="each is a module of data/benchmarks/") from None


def find(root: str | Path) -> Benchmark | None:
    """The one benchmark whose recordings the folder `root` holds; None for a file, or a folder of none."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = [b for b in (get(n) for n in names()) if b.holds(root)]
    if len(found) > 1:
        raise DataError(f"holds recordings of {len(found)} benchmarks ({', '.join(b.name for b in found)})",
                        path=root, hint="name the one to read (--source, or layout=)")
    return found[0] if found else None


def detect(root: str | Path) -> Benchmark:
    """The benchmark whose recordings the folder `root` holds; else a DataError saying what was expected."""
    root = Path(root)
    if not root.is_dir():
        raise DataError("not a folder of recorded outputs", path=root)
    found = find(root)
    if found is None:
        expected = ", ".join(f"{b.layout} ({b.name})" for b in (get(n) for n in names()))
        raise DataError("no recorded outputs found", path=root, hint=f"expected {expected}")
    return found
