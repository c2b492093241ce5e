"""The stage packages import only leftwards, and no modules import each other in a circle.

    .venv/bin/python -m pytest -q tests/test_layering.py

Stages, left to right: data ← training ← serving ← evaluation ← switchcraft (the CLI).
A module may import its own stage and the stages to its left, never one to its right,
not even inside a function: a lazy import hides the dependency, it does not remove it.
A circle is two or more modules that import each other, counting every import: a lazy one
inside a function or under `if TYPE_CHECKING:` closes the circle just the same (it only
moves the failure from import time to call time). A circle means a helper sits in the
wrong file; the fix is to move it into the module that owns it.
Dependencies that are not `import` statements count too: a package's lazy face (a `__getattr__` over a
name → module table: `from training import load_router` depends on training.router), a string import
(`importlib.import_module("x.y")`, `__import__("x.y")`) and a module run as a process (`[python, "-m", "x.y"]`).
Folders count as well as modules: the folders directly under a stage (serving/gateway, serving/console, …;
a module directly in the stage folder stands for itself) must not import each other in a circle either — one
of them sits below the other, and the one below never reaches back up.
Every module is read with `ast`, never imported, so the check costs well under a second.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = ("data", "training", "serving", "evaluation", "switchcraft")


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "data.pool_runner.runner"
    target: str  # imported module of the tree, e.g. "data.pool"
    file: str  # the importing file, relative to the root
    line: int
    module_level: bool  # False inside a function body

    def at(self) -> str:
        return f"{self.file}:{self.line}" + ("" if self.module_level else ", in a function")


def module_files(root: Path, stages: tuple[str, ...] = STAGES) -> dict[str, Path]:
    """Dotted module name → file, for every .py file under the stage folders."""
    modules = {}
    for stage in stages:
        for path in sorted((root / stage).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is a module of the tree (None for outside ones)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def lazy_faces(modules: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Package → {name: module} for each package `__init__` that defines `__getattr__` and holds a module-level
    table of names to modules of the tree (`_WHERE = {"load_router": "training.router"}`)."""
    faces = {}
    for module, path in modules.items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            continue
        table = {}
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Dict):
                for k, v in zip(value.keys, value.values):
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and v.value in modules:
                        table[k.value] = v.value
        if table:
            faces[module] = table
    return faces


STRING_IMPORTS = {"import_module", "__import__"}  # importlib.import_module("x.y"), __import__("x.y")


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, file: str, modules: dict[str, Path],
                 faces: dict[str, dict[str, str]] | None = None):
        self.module, self.file, self.modules, self.faces = module, file, modules, faces or {}
        self.package = module if is_package else module.rpartition(".")[0]
        self.depth = 0  # function bodies entered
        self.found: list[Import] = []

    def _add(self, target: str | None, node: ast.AST, module_level: bool | None = None) -> None:
        if target is not None and target != self.module:
            at_top = self.depth == 0 if module_level is None else module_level
            self.found.append(Import(self.module, target, self.file, node.lineno, at_top))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(_resolve(alias.name, self.modules), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            # `from data.pool import sample` imports the submodule; `from data.pool import Pool` the package;
            # `from training import load_router` the module training's lazy face takes it from.
            submodule = f"{base}.{alias.name}"
            if submodule in self.modules:
                self._add(submodule, node)
            elif alias.name in self.faces.get(base, {}):
                self._add(self.faces[base][alias.name], node)
            else:
                self._add(_resolve(base, self.modules), node)

    def visit_Call(self, node: ast.Call) -> None:
        """A string import: `import_module("x.y")` or `__import__("x.y")` with a literal name."""
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name in STRING_IMPORTS and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self._add(_resolve(node.args[0].value, self.modules), node, module_level=False)
        self.generic_visit(node)

    def _command(self, node: ast.List | ast.Tuple) -> None:
        """A module run as a process: `[sys.executable, "-m", "x.y", …]`."""
        items = node.elts
        for flag, target in zip(items, items[1:]):
            if isinstance(flag, ast.Constant) and flag.value == "-m" and isinstance(target, ast.Constant) \
                    and isinstance(target.value, str):
                self._add(_resolve(target.value, self.modules), node, module_level=False)
        self.generic_visit(node)

    visit_List = visit_Tuple = _command


def imports_of(root: Path, stages: tuple[str, ...] = STAGES) -> list[Import]:
    """Every import, at module level or inside a function, from one module of the tree to another."""
    modules = module_files(root, stages)
    faces = lazy_faces(modules)
    found: list[Import] = []
    for module, path in modules.items():
        file = str(path.relative_to(root))
        collector = _Collector(module, path.name == "__init__.py", file, modules, faces)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=file))
        found.extend(collector.found)
    return found


def upward_imports(imports: list[Import], stages: tuple[str, ...] = STAGES) -> list[str]:
    """One line per import of a stage to the right of the importing module's stage."""
    rank = {stage: i for i, stage in enumerate(stages)}
    bad = []
    for imp in imports:
        src, dst = imp.source.split(".")[0], imp.target.split(".")[0]
        if rank[dst] > rank[src]:
            allowed = ", ".join(stages[: rank[src] + 1])
            lazy = "" if imp.module_level else " inside a function"
            bad.append(f"{imp.file}:{imp.line}: {imp.source} imports {imp.target}{lazy} ({src} may import "
                       f"only {allowed}; move what it needs into {src} or further left)")
    return bad


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative) of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def _cycle_through(first: str, members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path first → … → first inside one component (breadth-first)."""
    parent: dict[str, str] = {}
    frontier = [first]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(parent[path[-1]])
                    return [*reversed(path), first]
                if child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"{first} is in a component but on no cycle")


def import_circles(imports: list[Import]) -> list[str]:
    """One line per circle: each module with the file:line of its import of the next."""
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], Import] = {}
    for imp in sorted(imports, key=lambda i: not i.module_level):  # name a module-level import first
        graph.setdefault(imp.source, set()).add(imp.target)
        graph.setdefault(imp.target, set())
        where.setdefault((imp.source, imp.target), imp)
    lines = []
    for component in _components(graph):
        cycle = _cycle_through(component[0], set(component), graph)
        hops = " → ".join(f"{a} ({where[a, b].at()})" for a, b in zip(cycle, cycle[1:])) + f" → {cycle[0]}"
        rest = sorted(set(component) - set(cycle))
        also = f"; the same circle also takes in {', '.join(rest)}" if rest else ""
        lines.append(f"import circle: {hops}{also} (move the shared code into the module that owns it)")
    return lines


def folder_of(module: str) -> str:
    """The folder directly under the stage that holds the module (a module directly in the stage folder: itself)."""
    return ".".join(module.split(".")[:2])


def folder_circles(imports: list[Import]) -> list[str]:
    """One line per circle of folders inside a stage, each hop named by one import that makes it."""
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], Import] = {}
    for imp in sorted(imports, key=lambda i: not i.module_level):
        a, b = folder_of(imp.source), folder_of(imp.target)
        if a == b or a.split(".")[0] != b.split(".")[0]:
            continue
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
        where.setdefault((a, b), imp)
    lines = []
    for component in _components(graph):
        cycle = _cycle_through(component[0], set(component), graph)
        hops = " → ".join(f"{a} ({where[a, b].at()}: {where[a, b].source} imports {where[a, b].target})"
                          for a, b in zip(cycle, cycle[1:]))
        lines.append(f"folder circle: {hops} → {cycle[0]} (one folder sits below the other: move what both need "
                     "into the lower one, or the wiring above both)")
    return lines


def test_no_stage_imports_a_stage_to_its_right():
    bad = upward_imports(imports_of(REPO))
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_circle():
    circles = import_circles(imports_of(REPO))
    assert not circles, "\n".join(circles)


def test_no_folder_circle():
    circles = folder_circles(imports_of(REPO))
    assert not circles, "\n".join(circles)


DOORS = ("serving.gateway", "serving.mcp", "serving.console", "serving.app")


def test_the_shared_serving_layer_imports_none_of_the_doors():
    """serving/core (keys, state, errors, money, the decision log) is used by the chat gateway, the MCP gateway and
    the console; it imports none of them, nor the wiring that mounts them."""
    imports = imports_of(REPO)
    core = [i for i in imports if i.source.startswith("serving.core")]
    assert len(core) > 20  # the scan saw the layer's own imports
    bad = [f"{i.at()}: {i.source} imports {i.target}" for i in core if i.target.startswith(DOORS)]
    assert not bad, "\n".join(bad)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_finds_an_upward_import_even_inside_a_function(tmp_path):
    _write(tmp_path, {
        "data/__init__.py": "",
        "data/a.py": "import json\nfrom data import b\n\ndef f():\n    from serving.x import y\n",
        "data/b.py": "",
        "serving/__init__.py": "",
        "serving/x.py": "from data.a import f\ny = 1\n",
    })
    bad = upward_imports(imports_of(tmp_path, ("data", "serving")), ("data", "serving"))
    assert bad == ["data/a.py:5: data.a imports serving.x inside a function (data may import only "
                   "data; move what it needs into data or further left)"]


def test_checker_names_each_hop_of_a_circle_lazy_imports_included(tmp_path):
    _write(tmp_path, {
        "data/__init__.py": "",
        "data/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from data.b import B\n",
        "data/b.py": "def f():\n    from .c import C\n",
        "data/c.py": "from data import a\n",
        "data/d.py": "from data.a import x\n",
        "data/pkg/__init__.py": "from data.pkg.sub import y\n",
        "data/pkg/sub.py": "from data.pkg import z\n",
    })
    circles = import_circles(imports_of(tmp_path, ("data",)))
    assert circles == [
        "import circle: data.a (data/a.py:3) → data.b (data/b.py:2, in a function) → data.c (data/c.py:1) "
        "→ data.a (move the shared code into the module that owns it)",
        "import circle: data.pkg (data/pkg/__init__.py:1) → data.pkg.sub (data/pkg/sub.py:1) → data.pkg "
        "(move the shared code into the module that owns it)",
    ]


def test_checker_follows_a_lazy_face_into_a_circle(tmp_path):
    _write(tmp_path, {
        "training/__init__.py": ('_WHERE = {"load_router": "training.router"}\n\n'
                                 "def __getattr__(name):\n    import importlib\n"
                                 "    return getattr(importlib.import_module(_WHERE[name]), name)\n"),
        "training/router.py": "from training.recipe import fit\n",
        "training/recipe.py": "def fit():\n    from training import load_router\n",
    })
    circles = import_circles(imports_of(tmp_path, ("training",)))
    assert circles == ["import circle: training.recipe (training/recipe.py:2, in a function) → training.router "
                       "(training/router.py:1) → training.recipe (move the shared code into the module that owns it)"]


def test_checker_finds_a_string_import_and_a_module_run_as_a_process(tmp_path):
    _write(tmp_path, {
        "data/__init__.py": "",
        "data/a.py": 'import importlib\n\ndef f():\n    return importlib.import_module("serving.x")\n',
        "serving/__init__.py": "",
        "serving/x.py": "",
        "evaluation/__init__.py": "",
        "evaluation/bench.py": ('import subprocess, sys\n\ndef run():\n'
                                '    subprocess.run([sys.executable, "-m", "switchcraft.cli", "serve"])\n'),
        "switchcraft/__init__.py": "",
        "switchcraft/cli.py": 'x = __import__("evaluation.bench", fromlist=["run"])\n',
    })
    stages = ("data", "serving", "evaluation", "switchcraft")
    bad = upward_imports(imports_of(tmp_path, stages), stages)
    assert bad == [
        "data/a.py:4: data.a imports serving.x inside a function (data may import only data; move what it needs "
        "into data or further left)",
        "evaluation/bench.py:4: evaluation.bench imports switchcraft.cli inside a function (evaluation may import "
        "only data, serving, evaluation; move what it needs into evaluation or further left)",
    ]


def test_checker_finds_a_folder_arrow_back_up(tmp_path):
    _write(tmp_path, {
        "serving/__init__.py": "",
        "serving/gateway/__init__.py": "",
        "serving/gateway/app.py": "from serving.console.views import page\n",
        "serving/gateway/auth.py": "",
        "serving/console/__init__.py": "",
        "serving/console/views.py": "from serving.gateway.auth import check\npage = 1\n",
    })
    imports = imports_of(tmp_path, ("serving",))
    assert import_circles(imports) == []  # no module circle: only the folders go round
    assert folder_circles(imports) == [
        "folder circle: serving.console (serving/console/views.py:1: serving.console.views imports "
        "serving.gateway.auth) → serving.gateway (serving/gateway/app.py:1: serving.gateway.app imports "
        "serving.console.views) → serving.console (one folder sits below the other: move what both need into the "
        "lower one, or the wiring above both)"]
