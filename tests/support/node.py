"""Node 22 and the JavaScript packages of tests/adapters/js, installed by `make js-clients` (make test).

Node comes from the npm registry's `node-linux-<arch>` package into `.node/`; the packages are pinned by
tests/adapters/js/package-lock.json. A missing install fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = ROOT / "tests" / "adapters" / "js"
HINT = "run `make js-clients` (make test installs Node 22 and the pinned packages)"


def node() -> Path:
    found = sorted((ROOT / ".node" / "node_modules").glob("node-*-*/bin/node"))
    if not found:
        pytest.fail(f"Node 22 is not installed in .node/: {HINT}")
    version = subprocess.run([str(found[0]), "--version"], capture_output=True, text=True, check=True).stdout
    if int(version.strip().lstrip("v").split(".")[0]) < 22:
        pytest.fail(f"{found[0]} is {version.strip()}, older than 22: {HINT}")
    return found[0]


def package(name: str) -> Path:
    path = JS_DIR / "node_modules" / name
    if not (path / "package.json").exists():
        pytest.fail(f"the JavaScript package {name} is not installed: {HINT}")
    return path


def run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`node args...` in tests/adapters/js, with the project's Node first on PATH."""
    binary = node()
    env = {"PATH": f"{binary.parent}:/usr/bin:/bin", "HOME": str(JS_DIR), "NO_COLOR": "1"}
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout, cwd=JS_DIR,
                          env=env)


def steps(script: str, *args: str, timeout: float = 120) -> dict[str, dict[str, Any]]:
    """Run a client script that prints one JSON line per step; its steps by name."""
    done = run([script, *args], timeout)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line.pop("step"): line for line in lines}
