"""The dependency rule: `adapters`, `workers` and `cli` import the core; the core imports none of them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTER = ("adapters", "workers", "cli")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_core_imports_no_adapter_worker_or_cli_module() -> None:
    offending = {
        str(path.relative_to(ROOT)): sorted(n for n in _imports(path) if n.split(".")[0] in OUTER)
        for path in sorted((ROOT / "tasks_backend").rglob("*.py"))
    }
    assert {path: names for path, names in offending.items() if names} == {}


def test_the_command_line_program_is_outside_the_core() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'tasks-backend = "cli:main"' in pyproject
    assert not (ROOT / "tasks_backend" / "cli.py").exists()
