"""Shared fixtures: a real Redis, a real in-process Celery worker, the app over real HTTP.

Redis: `TEST_REDIS_URL` (host and port; the suite uses databases 14 and 15 and unique key prefixes),
otherwise an embedded redis-server started for the session. With `TEST_REDIS_CLUSTER` (`1` to start a
three-primary cluster on loopback ports for the session, or the `redis+cluster://` URL of one) the job store
is the cluster and that Redis is only the Celery broker. Nothing here mocks Redis or Celery.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery.contrib.testing.worker import start_worker
from werkzeug.serving import make_server

from adapters.app import create_app
from tasks_backend.access.auth import token_digest
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.devtools.embedded_cluster import LocalCluster
from tasks_backend.service.runtime import Runtime, build_runtime
from workers.celery_app import create_celery

JOB_MODULES = ("tasks_backend.demo", "tests.support.jobs")


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail with `message` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


#: Where a test's fixtures leave what reads their processes' logs (see `show_logs_on_failure`).
_LOGS = pytest.StashKey[list[Callable[[], str]]]()


def show_logs_on_failure(request: pytest.FixtureRequest, logs: Callable[[], str]) -> None:
    """Have the report of a test whose setup or call fails carry `logs()` (the output of processes a fixture
    started), read as it fails. A test's exception never reaches its fixtures' code (an `except` around a fixture's
    `yield` runs for nothing the test does), so a fixture registers here instead of printing."""
    request.node.stash.setdefault(_LOGS, []).append(logs)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.failed and report.when in ("setup", "call"):
        for logs in item.stash.get(_LOGS, []):
            try:
                text = logs()
            except OSError as error:  # a process that never wrote its log
                text = f"(no log: {error})"
            report.sections.append(("logs of the test's processes", text))
    return report


class RedisBase(str):
    """`redis://host:port` of a real Redis server; `store_url` is the Redis Cluster the job store uses instead,
    if any (the server is then the broker)."""

    store_url: str | None = None


@pytest.fixture(scope="session")
def redis_base() -> Iterator[RedisBase]:
    with ExitStack() as stack:
        url = os.environ.get("TEST_REDIS_URL")
        if url:
            base = RedisBase(url.rstrip("/").rsplit("/", 1)[0] if url.count("/") > 2 else url)
        else:
            server = EmbeddedRedis(appendonly=False).start()
            stack.callback(server.stop)
            base = RedisBase(f"redis://127.0.0.1:{server.port}")
        cluster = os.environ.get("TEST_REDIS_CLUSTER", "")
        if cluster == "1":
            base.store_url = stack.enter_context(local_cluster()).url
        elif cluster:
            base.store_url = cluster
        yield base


@contextmanager
def local_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def sentinel_group(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A primary, a replica and three Sentinels of this test's own (tests/support/sentinel.py)."""
    from tests.support.sentinel import SentinelGroup

    group = SentinelGroup(tmp_path / "sentinel")
    show_logs_on_failure(request, group.logs)
    try:
        yield group.start()
    finally:
        group.stop()


@pytest.fixture(scope="session")
def amqp_url() -> Iterator[str]:
    """`amqp://…` of a real RabbitMQ (`TEST_AMQP_URL`, or the local one `make test` starts), in a vhost
    of the session's own."""
    from tests.support.rabbit import AMQP_URL, reachable, session_vhost

    assert reachable(AMQP_URL), f"RabbitMQ is not reachable at {AMQP_URL}: `make rabbitmq` starts one"
    with session_vhost(AMQP_URL) as url:
        yield url


#: The brokers a test marked with the `broker` fixture runs against.
BROKERS = ("redis", "rabbitmq")


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The `broker_url` setting for each broker: None (the store's Redis), or RabbitMQ. Use with
    `forget_broker` (or `make_broker_settings`) so that the test's queue is deleted afterwards."""
    yield None if request.param == "redis" else request.getfixturevalue("amqp_url")


@pytest.fixture
def make_broker_settings(broker: str | None, redis_base: str) -> Iterator[Callable[..., Settings]]:
    """`make_settings` on the test's broker; RabbitMQ queues made this way are deleted at the end."""
    made: list[Settings] = []

    def make(base: str | None = None, **overrides: Any) -> Settings:
        if broker is not None:  # else the broker `make_settings` picks (the store's Redis, or beside a Cluster)
            overrides = {"broker_url": broker, **overrides}
        made.append(make_settings(base or redis_base, **overrides))
        return made[-1]

    yield make
    if broker is not None:
        from tests.support.rabbit import remove

        for settings in made:
            remove(settings)


class Users:
    """Principals with bearer tokens, written to a token file the app re-reads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.write_text("# principal:sha256(token)\n")
        self._lock = threading.Lock()

    def new(self, prefix: str = "user") -> tuple[str, str]:
        name = f"{prefix}-{secrets.token_hex(4)}"
        token = secrets.token_urlsafe(24)
        with self._lock, self.path.open("a") as fh:
            fh.write(f"{name}:{token_digest(token)}\n")
        return name, token


@pytest.fixture(scope="session")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth") / "tokens"


@pytest.fixture(scope="session")
def users(token_file: Path) -> Users:
    return Users(token_file)


def single_redis(redis_base: str) -> str:
    """`redis_base` as a plain Redis for the job store too, where the suite's store is a Cluster (`make
    test-cluster`): for what only a single Redis does (the broker in the store's own Redis, one script over a job's
    keys and the broker's, a relay in front of the store)."""
    return str(redis_base)  # a plain str: no `store_url`


def make_settings(redis_base: str, **overrides: Any) -> Settings:
    suffix = secrets.token_hex(4)
    store_url = getattr(redis_base, "store_url", None)
    values: dict[str, Any] = {
        # The broker shares the store's database, as by default in production (one round trip per submit).
        "redis_url": store_url or f"{redis_base}/14",
        "broker_url": f"{redis_base}/14" if store_url else None,
        "key_prefix": f"tbtest{suffix}",
        "queue": f"tbtest{suffix}",
        "job_modules": JOB_MODULES,
        "tokens": "alice:alice-token,bob:bob-token,ops:ops-token,oper:oper-token,carol:carol-token,dave:dave-token",
        "roles": "finance=dave",
        "admins": ("ops",),
        "operators": ("oper",),
        "lease_s": 3.0,
        "queued_grace_s": 2.0,
        "sweep_interval_s": 0.2,
        "sse_max_s": 10.0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="session")
def live_port() -> int:
    """The port `live_url` serves on, chosen before the app exists: the agent card names it."""
    return free_port()


@pytest.fixture(scope="session")
def settings(redis_base: str, token_file: Path, users: Users, live_port: int) -> Settings:
    return make_settings(redis_base, tokens_file=str(token_file), public_url=f"http://127.0.0.1:{live_port}")


@pytest.fixture(scope="session")
def runtime(settings: Settings) -> Runtime:
    return build_runtime(settings)


@pytest.fixture(scope="session")
def worker(settings: Settings) -> Iterator[Any]:
    """A real Celery worker consuming the session's queue, in this process (threads pool)."""
    app = create_celery(settings)
    # With heartbeats on, as in a real worker, the worker has an event dispatcher that a monitor
    # (Flower) can switch on with `enable_events`; task events are off until then.
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, loglevel="WARNING",
                      shutdown_timeout=15, without_heartbeat=False):
        yield app


@pytest.fixture(scope="session")
def flask_app(runtime: Runtime) -> Any:
    return create_app(runtime=runtime)


@pytest.fixture
def client(flask_app: Any) -> Any:
    return flask_app.test_client()


@pytest.fixture(scope="session")
def live_url(flask_app: Any, live_port: int) -> Iterator[str]:
    """The app served over real HTTP on loopback (threaded werkzeug server)."""
    server = make_server("127.0.0.1", live_port, flask_app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


@pytest.fixture
def http(live_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_url, timeout=10) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ALICE = bearer("alice-token")
BOB = bearer("bob-token")
OPS = bearer("ops-token")
#: An operator (`TASKS_BACKEND_OPERATORS`): acts on any owner's jobs, answers none of their questions.
OPER = bearer("oper-token")
#: Principals that own nothing in most tests: `dave` holds the role `finance`, `carol` no role.
CAROL = bearer("carol-token")
DAVE = bearer("dave-token")


#: Starts the app built from some settings over real HTTP (a web server of its own, stopped after the test).
Serve = Callable[[Settings], str]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """`serve(settings)` -> the URL of the app built from `settings`."""
    servers: list[Any] = []

    def start(settings: Settings) -> str:
        server = make_server("127.0.0.1", 0, create_app(runtime=build_runtime(settings)), threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
