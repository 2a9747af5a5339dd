"""schemathesis (its command line, as CI would run it) against the served `/openapi.json` over real HTTP:
every check, deterministic generation, a bounded number of examples, no failure.

`schemathesis.toml` beside this file says which phase is left out and which two statuses are widened,
and why (generator faults, each reproduced there). The server here has its own key prefix and event
streams of half a second, so the stateful phase (which follows `Location` into `/events`) stays short."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from adapters.app import create_app
from adapters.http import jobs
from tasks_backend.devtools.embedded import free_port
from tests.conftest import make_settings

CONFIG = Path(__file__).with_name("schemathesis.toml")
ST = Path(sys.executable).with_name("st")


@pytest.fixture(scope="module")
def fuzz_url(redis_base: str) -> Iterator[str]:
    port = free_port()
    settings = make_settings(redis_base, sse_max_s=0.5, public_url=f"http://127.0.0.1:{port}")
    server = make_server("127.0.0.1", port, create_app(settings), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # And a stream's wait for a change as short: no worker runs the jobs the phase makes, whose streams would
    # otherwise each wait the whole block (10 s) for a change that never comes.
    patch = pytest.MonkeyPatch()
    patch.setattr(jobs, "STREAM_BLOCK_MS", 500)
    try:
        yield settings.public_url
    finally:
        patch.undo()
        server.shutdown()


@pytest.mark.timeout(300)
def test_the_served_api_matches_its_description(fuzz_url: str, tmp_path: Path) -> None:
    run = subprocess.run(
        [str(ST), "--config-file", str(CONFIG), "run", f"{fuzz_url}/openapi.json",
         "-H", "Authorization: Bearer alice-token", "--checks", "all", "--phases", "examples,fuzzing,stateful",
         "--max-examples", "30", "--generation-deterministic", "--workers", "2", "--no-color"],
        capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path)  # its cache stays out of the tree
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:]
    assert "Tested: 25" in report and "generated, 0 passed" not in report, report[-3000:]
