"""The layers, lowest first; each part imports only its own layer and the layers below it.

    model      tasks_backend.model, tasks_backend.errors
    store      tasks_backend.store, tasks_backend.config (settings know Redis's address forms)
    beside     tasks_backend.running, .push, .access, .serving (each may use the others)
    service    tasks_backend.service
    faces      tasks_backend (the in-process API), .client, .demo, .devtools
    outer      adapters, workers; workers import no adapters
    program    tasks_backend.cli: the composition root, the one part of tasks_backend that imports the outer layer
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("tasks_backend", "adapters", "workers")

#: Module or package prefix -> layer (a longer prefix wins; `tasks_backend` alone is its __init__ only).
LAYERS: dict[str, int] = {
    "tasks_backend.model": 0, "tasks_backend.errors": 0,
    "tasks_backend.store": 1, "tasks_backend.config": 1,
    "tasks_backend.running": 2, "tasks_backend.push": 2, "tasks_backend.access": 2, "tasks_backend.serving": 2,
    "tasks_backend.remote": 2,
    "tasks_backend.service": 3,
    "tasks_backend": 4, "tasks_backend.client": 4, "tasks_backend.demo": 4, "tasks_backend.devtools": 4,
    "adapters": 5, "workers": 5,
    "tasks_backend.cli": 6,
}
#: Imports against the order that the code still has, each with the change that removes it (issue 24). The
#: last test keeps this list honest: an entry whose import is gone must be deleted.
KNOWN: dict[tuple[str, str], str] = {}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _imports(path: Path) -> set[str]:
    """Every project module a file imports, lazily or not, relative imports resolved."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{source}.{alias.name}"
                names.add(full if _is_module(full) else source)
    return {n for n in names if n.split(".")[0] in PRODUCT}


def _layer(module: str) -> int:
    if module == "tasks_backend":
        return LAYERS["tasks_backend"]
    best = max((p for p in LAYERS if p != "tasks_backend" and (module == p or module.startswith(p + "."))),
               key=len, default=None)
    assert best is not None, f"{module} has no layer: add it to LAYERS"
    return LAYERS[best]


def _product_files() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py"))


def _edges() -> set[tuple[str, str]]:
    return {(_module(p), name) for p in _product_files() for name in _imports(p)}


def test_each_layer_imports_only_its_own_and_the_layers_below() -> None:
    against = {(a, b) for a, b in _edges() if _layer(b) > _layer(a)}
    assert sorted(against - set(KNOWN)) == []


def test_workers_import_no_adapters() -> None:
    assert sorted((a, b) for a, b in _edges() if a.startswith("workers") and b.startswith("adapters")) == []


def test_only_the_command_line_imports_adapters_or_workers_inside_the_core() -> None:
    offending = sorted((a, b) for a, b in _edges() if a.split(".")[0] == "tasks_backend"
                       and not (a == "tasks_backend.cli" or a.startswith("tasks_backend.cli."))
                       and b.split(".")[0] in ("adapters", "workers"))
    assert offending == []


def test_every_subpackage_states_its_rule() -> None:
    for init in sorted(p for top in PRODUCT for p in (ROOT / top).rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "Rule:" in doc or init.parent == ROOT / "tasks_backend", init
        assert doc and len(doc.splitlines()) <= 10, init


def test_the_command_line_program_is_inside_the_core_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"tasks-backend": "tasks_backend.cli:main"}
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["tasks_backend*", "adapters*", "workers*"]
    assert not (ROOT / "cli").exists()


def test_the_known_exceptions_are_still_there() -> None:
    assert sorted(set(KNOWN) - _edges()) == [], "an exception was fixed: delete it from KNOWN"


def _cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycle_between_product_modules() -> None:
    # Lazy imports inside functions count: they hide a cycle from the import system, not from the reader.
    cycles = _cycles(_edges())
    assert not cycles, f"modules that import each other, directly or around a loop: {cycles}"


def test_the_cycle_check_finds_a_cycle() -> None:
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d")}
    assert _cycles(edges) == [["a", "b", "c"]]
