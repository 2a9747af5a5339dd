"""The official MCP conformance suite (@modelcontextprotocol/conformance) against the served /mcp.

The suite's client sends no credentials, so the app is served here behind a layer that adds one
user's bearer token to requests that carry none: every other header (Host, Origin) reaches the app as
the suite sent it. tests/adapters/js/conformance.yml lists the scenarios that apply, which must pass,
and those that do not, each with its reason; every scenario of the suite is in one list or the other.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
import yaml
from werkzeug.serving import make_server

from tests.support.node import JS_DIR, package, run

pytestmark = pytest.mark.usefixtures("worker")

SCENARIOS = yaml.safe_load((JS_DIR / "conformance.yml").read_text())
APPLIES: list[str] = SCENARIOS["applies"]
NOT_APPLICABLE: dict[str, str] = SCENARIOS["not_applicable"]


def with_token(app: Any, token: str) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
    def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        environ.setdefault("HTTP_AUTHORIZATION", f"Bearer {token}")
        result: Iterable[bytes] = app(environ, start_response)
        return result

    return wrapped


@pytest.fixture(scope="module")
def suite_url(flask_app: Any, users: Any) -> Iterator[str]:
    _, token = users.new("conformance")
    server = make_server("127.0.0.1", 0, with_token(flask_app, token), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/mcp"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def results(suite_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Each scenario's checks, from one run of the whole suite (a few seconds)."""
    cli = package("@modelcontextprotocol/conformance") / "dist" / "index.js"
    out = tmp_path_factory.mktemp("conformance")
    done = run([str(cli), "server", "--url", suite_url, "--suite", "all", "-o", str(out)], timeout=300)
    runs = sorted(out.glob("server-*/checks.json"))
    assert runs, f"the suite wrote no results:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for checks in runs:
        # Result folders are named server-<scenario>-<timestamp>.
        name = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", checks.parent.name.removeprefix("server-"))
        by_scenario[name] = json.loads(checks.read_text())
    return by_scenario


def test_every_scenario_of_the_suite_is_accounted_for(results: dict[str, list[dict[str, Any]]]) -> None:
    assert not set(APPLIES) & set(NOT_APPLICABLE)
    assert all(isinstance(reason, str) and reason for reason in NOT_APPLICABLE.values())
    assert set(results) == set(APPLIES) | set(NOT_APPLICABLE), "update tests/adapters/js/conformance.yml"


@pytest.mark.parametrize("scenario", APPLIES)
def test_applicable_scenario_passes(results: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    checks = results.get(scenario)
    assert checks is not None, f"the suite did not run {scenario}"
    failed = [f"{c['id']}: {c.get('errorMessage')}" for c in checks if c["status"] == "FAILURE"]
    assert failed == [], f"{scenario} failed:\n" + "\n".join(failed)
