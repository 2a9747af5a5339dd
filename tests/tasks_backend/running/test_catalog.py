"""Applications that only submit need no job code: workers publish their operations, submits are checked
against them (`tasks_backend.running.catalog`). Real Redis, a real worker process, the README's example as a process."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tasks_backend import Principal, connect_service
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.errors import InvalidParams, UnknownOperation
from tasks_backend.running.catalog import PublishedOperations, publish
from tasks_backend.running.registry import Registry
from tasks_backend.store.connect import connect
from tasks_backend.store.keys import Keys
from tests.conftest import make_settings, wait_until
from tests.support.procs import ROOT, settings_env, worker_process

SERVER_JOBS = '''
from marshmallow import Schema, fields

from tasks_backend import job


class CountParams(Schema):
    upto = fields.Integer(required=True)
    label = fields.String(allow_none=True, load_default=None)


@job("reports.count", params=CountParams, ttl=120, poll_interval=0.5, description="Counts up to a number")
def count(ctx, upto, label):
    return {"counted": upto, "label": label}
'''


@pytest.fixture
def server_only(tmp_path: Path, redis_base: str) -> Iterator[Settings]:
    """Settings naming a job module that only the worker can import (its folder is on the worker's PYTHONPATH
    alone, as a project folder is on the server's), and a worker process running it."""
    folder = tmp_path / "project"
    folder.mkdir()
    module = f"server_reports_{secrets.token_hex(4)}"
    (folder / f"{module}.py").write_text(SERVER_JOBS)
    settings = make_settings(redis_base, job_modules=(module, "tasks_backend.demo"))
    env = settings_env(settings)
    worker = worker_process(settings, tmp_path / "worker.log", pool="threads", concurrency=2,
                            PYTHONPATH=f"{folder}:{env['PYTHONPATH']}")
    try:
        client, key = connect(settings.redis_url), Keys(settings.key_prefix).operations()
        wait_until(lambda: client.hexists(key, "reports.count") or not worker.alive(), 30,
                   message="the worker to publish its operations")
        assert worker.alive(), worker.output()
        yield settings
    finally:
        worker.stop()


def test_the_in_process_example_runs_where_only_the_server_can_import_the_job_modules(server_only: Settings) -> None:
    env = settings_env(server_only)  # TASKS_BACKEND_JOBS names the worker's module; PYTHONPATH cannot reach it
    example = subprocess.run([sys.executable, "examples/in_process.py"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=90)
    assert example.returncode == 0, example.stderr
    lines = example.stdout.splitlines()
    assert lines[0].endswith(" queued SubmitOutcome.CREATED") and lines[1] == "completed 2", example.stdout


def test_a_submit_only_service_checks_params_against_what_the_workers_published(server_only: Settings) -> None:
    service = connect_service(server_only)  # the job module cannot be imported in this process
    me = Principal("submit-only")
    with pytest.raises(InvalidParams) as bad:
        service.submit(me, "reports.count", {"upto": "ten"})
    assert bad.value.extra["errors"] == {"upto": ["must be integer"]}
    with pytest.raises(UnknownOperation) as unknown:
        service.submit(me, "reports.nothing", {})
    assert {"reports.count", "demo.export"} <= set(unknown.value.extra["operations"])
    record, _ = service.submit(me, "reports.count", {"upto": 3})
    assert (record.ttl_ms, record.poll_ms) == (120_000, 500)  # the operation's own, as published
    done = service.wait(me, record.id, timeout_s=60)
    assert (done.state.value, done.result) == ("completed", {"counted": 3, "label": None})


def test_a_publish_drops_what_no_worker_published_within_the_ttl_and_keeps_a_ttl(redis_base: str) -> None:
    settings = make_settings(redis_base)
    client, keys = connect(settings.redis_url), Keys(settings.key_prefix)
    key = keys.operations()
    client.hset(key, mapping={"gone.op": '1000 {"name":"gone.op","paramsSchema":{}}', "bad.op": "not an entry"})
    registry = Registry.from_modules(["tasks_backend.demo"])
    assert publish(client, keys, registry, ttl_s=3600) == len(registry)
    assert publish(client, keys, registry, ttl_s=3600) == len(registry)  # applied twice: the same catalog
    held = client.hgetall(key)
    assert sorted(held) == sorted(spec.name for spec in registry)
    entry = json.loads(held["demo.sleep"].partition(" ")[2])
    assert entry["paramsSchema"] == registry.json_schema("demo.sleep") and entry["pollIntervalS"] is not None
    assert 3_500_000 < client.pttl(key) <= 3_600_000
    assert [spec.name for spec in PublishedOperations(client, keys)] == sorted(held)


def test_with_nothing_published_a_submit_says_to_start_a_worker(redis_base: str) -> None:
    settings = make_settings(redis_base, job_modules=("no_such_module_here",))
    with pytest.raises(UnknownOperation) as raised:
        connect_service(settings).submit(Principal("someone"), "demo.sleep", {"seconds": 1})
    assert "start a worker" in str(raised.value) and settings.key_prefix in str(raised.value)


def _hgetall_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_hgetall", {}).get("calls", 0))


def test_unknown_names_read_the_catalog_again_at_most_once_per_cache_period(tmp_path: Path) -> None:
    """Submits naming operations no worker published (a typo, or a caller making names up) cost one read of
    the whole hash per cache period, not one per submit; a name published since the last read is still found."""
    server = EmbeddedRedis(appendonly=False, data_dir=str(tmp_path)).start()  # its own: nothing else counts
    try:
        client, keys = connect(server.url), Keys("tbcatalog")
        publish(client, keys, Registry.from_modules(["tasks_backend.demo"]))
        operations = PublishedOperations(client, keys, cache_s=3600)
        before = _hgetall_calls(client)
        for n in range(50):
            with pytest.raises(UnknownOperation):
                operations.get(f"made.up{n}")
        assert _hgetall_calls(client) - before == 2  # the first read, and one again for the first miss
        assert operations.get("demo.sleep").name == "demo.sleep"
        assert _hgetall_calls(client) - before == 2

        late = PublishedOperations(client, keys, cache_s=3600)
        late.get("demo.sleep")
        client.hset(keys.operations(), "late.op", '1 {"name":"late.op","paramsSchema":{}}')
        assert late.get("late.op").name == "late.op"  # published since its last read: found on the first miss
    finally:
        server.stop()
