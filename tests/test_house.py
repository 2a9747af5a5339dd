"""House rules a reader relies on: modules small enough to read, each saying in a few lines what it owns, one class
per name, and a wheel that installs exactly the three top-level packages with the UI's templates and static files."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("tasks_backend", "adapters", "workers")
MAX_LINES = 400


def test_no_product_module_is_over_400_lines() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
             for top in PRODUCT for p in (ROOT / top).rglob("*.py")}
    assert sizes, "no product modules found"
    over = sorted((path, n) for path, n in sizes.items() if n > MAX_LINES)
    assert not over, f"over {MAX_LINES} lines (split by what each part owns): {over}"


def _source_copy(into: Path) -> Path:
    """What the build sees, outside the checkout (a build leaves build/ and *.egg-info/ behind): the project
    files and every top-level package of the checkout, so a package the build should leave out is there to
    be left out."""
    source = into / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "node_modules", "*.egg-info")
    for top in sorted(p for p in ROOT.iterdir() if (p / "__init__.py").is_file()):
        shutil.copytree(top, source / top.name, ignore=ignore)
    return source


def test_the_wheel_has_exactly_the_three_packages_and_the_ui_files(tmp_path: Path) -> None:
    source, out = _source_copy(tmp_path), tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--quiet", "-w", str(out)],
                   check=True, timeout=600)
    (wheel,) = out.glob("tasks_backend-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        record = {line.split(",")[0] for line in archive.read(f"{info}/RECORD").decode().splitlines() if line}
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
    assert record == names
    packages = {n.split("/")[0] for n in record if not n.split("/")[0].endswith(".dist-info")}
    assert sorted(packages) == ["adapters", "tasks_backend", "workers"]
    assert sorted(top_level) == ["adapters", "tasks_backend", "workers"]

    ui = ROOT / "adapters" / "ui"
    shipped = sorted(p.relative_to(ROOT).as_posix() for folder in ("templates", "static")
                     for p in (ui / folder).rglob("*") if p.is_file())
    assert shipped, "the UI has no templates or static files to ship"
    assert sorted(set(shipped) - record) == []
    assert "tasks_backend/py.typed" in record


MAX_DOC_LINES = 10


def _modules() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py"))


def _doc_lines(path: Path) -> int:
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)), clean=False)
    return len(doc.splitlines()) if doc else 0


def test_every_module_says_what_it_owns_in_at_most_ten_lines() -> None:
    lines = {p.relative_to(ROOT).as_posix(): _doc_lines(p) for p in _modules()}
    assert sorted(m for m, n in lines.items() if n == 0) == []
    assert sorted(m for m, n in lines.items() if n > MAX_DOC_LINES) == []


def test_one_class_per_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert {name: places for name, places in where.items() if len(places) > 1} == {}
