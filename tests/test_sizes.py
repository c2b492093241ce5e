"""Every source module stays readable: no file over 500 lines, no function over 100 (the stage packages and the CLI;
tests are not held to it)."""

from __future__ import annotations

import ast

from tests.test_layering import REPO, STAGES

MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 100


def _sources():
    for stage in STAGES:
        yield from sorted((REPO / stage).rglob("*.py"))


def test_no_source_file_is_over_500_lines():
    files = list(_sources())
    assert len(files) > 100  # the scan saw the tree
    long = [f"{p.relative_to(REPO)}: {n} lines" for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert not long, "split these:\n" + "\n".join(long)


def test_no_function_is_over_100_lines():
    long = []
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(REPO)}:{node.lineno}: {node.name} is {n} lines")
    assert not long, "split these:\n" + "\n".join(long)
