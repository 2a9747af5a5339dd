"""House rules a reader relies on: each module says in a few lines what it owns, and each class name means one class."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("tasks_backend", "adapters", "workers")
MAX_DOC_LINES = 10
#: Modules whose docstring may be longer, each with why.
LONG_DOCS: dict[str, str] = {
    "tasks_backend/errors.py": "the error tree is the module's content",
}


def _modules() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py"))


def _doc_lines(path: Path) -> int:
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)), clean=False)
    return len(doc.splitlines()) if doc else 0


def test_every_module_says_what_it_owns_in_at_most_ten_lines() -> None:
    lines = {p.relative_to(ROOT).as_posix(): _doc_lines(p) for p in _modules()}
    assert sorted(m for m, n in lines.items() if n == 0) == []
    assert sorted(m for m, n in lines.items() if n > MAX_DOC_LINES and m not in LONG_DOCS) == []
    assert sorted(m for m in LONG_DOCS if lines.get(m, 0) <= MAX_DOC_LINES) == [], "no longer long: delete it"


def test_one_class_per_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert {name: places for name, places in where.items() if len(places) > 1} == {}
