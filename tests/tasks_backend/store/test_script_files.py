"""Every script is a `.lua` file that opens with the keys and arguments it takes, and every one is shipped."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from tasks_backend.store import scripts

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / "tasks_backend" / "store" / "scripts"


def lua_files() -> list[Path]:
    return sorted(FOLDER.rglob("*.lua"))


def test_every_script_opens_with_its_keys_and_arguments() -> None:
    assert lua_files()
    for path in lua_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("-- KEYS: "), path.name
        opening = [line for line in lines if line.startswith("--")][:4]
        assert any(line.startswith("-- ARGV: ") for line in opening), path.name


def test_every_lua_file_is_package_data() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = project["tool"]["setuptools"]["package-data"]["tasks_backend.store"]
    for path in lua_files():
        relative = path.relative_to(ROOT / "tasks_backend" / "store").as_posix()
        assert any(fnmatch(relative, p) and relative.count("/") == p.count("/") for p in patterns), relative


def test_every_lua_file_is_read_and_every_library_used_exists() -> None:
    assert sorted(scripts.SOURCES) == sorted(p.relative_to(FOLDER).as_posix() for p in lua_files())
    for path, source in scripts.SOURCES.items():
        for lib in scripts.uses(source):
            assert f"lib/{lib}.lua" in scripts.SOURCES, (path, lib)


def test_no_script_converts_redis_time_itself() -> None:
    """`clock()` in the prelude is the one conversion of Redis `TIME` to milliseconds."""
    for path, source in scripts.SOURCES.items():
        if path != scripts.PRELUDE:
            assert "redis.call('TIME')" not in source.replace("local t = redis.call('TIME')", ""), path
            assert "* 1000 +" not in source, path


def test_no_product_module_holds_lua_in_a_string() -> None:
    """Every script is a file here (the limits' five in `limits/`), run through the one runner with the one prelude."""
    modules = [p for folder in ("tasks_backend", "adapters", "workers") for p in (ROOT / folder).rglob("*.py")]
    assert [str(p.relative_to(ROOT)) for p in modules
            if re.search(r"redis\.p?call\(", p.read_text(encoding="utf-8"))] == []
    assert sorted(p.name for p in (FOLDER / "limits").glob("*.lua")) == [
        "auth_fail.lua", "charge.lua", "count.lua", "rate.lua", "stream.lua"]
