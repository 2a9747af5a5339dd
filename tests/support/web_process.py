"""`tasks-backend web` as deployed (gunicorn, its gevent worker, the app) on a Redis of the test's own and no
worker, so its jobs stay queued; the test reads that Redis's own figures (`INFO clients`, `CLIENT LIST`)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.store.keys import Keys
from tests.conftest import make_settings
from tests.support.procs import Proc, settings_env, wait_for_http


class Web:
    def __init__(self, base: str, store: redis.Redis, keys: Keys) -> None:
        self.base, self.store, self.keys = base, store, keys

    def clients(self) -> dict[str, Any]:
        return dict(self.store.info("clients"))

    def blocked_in_xread(self) -> int:
        """Connections Redis lists as blocked in XREAD (`CLIENT LIST`: flag `b`)."""
        return sum(1 for c in self.store.client_list() if c["cmd"] == "xread" and "b" in c["flags"])

    def blocked_and_streams(self, principal: str) -> tuple[int, int]:
        """(blocked clients, the principal's open streams), read in one transaction: figures of the same moment."""
        pipe = self.store.pipeline(transaction=True)
        pipe.info("clients")
        pipe.zcard(self.keys.streams(principal))
        clients, slots = pipe.execute()
        return int(clients["blocked_clients"]), int(slots)

    def assert_released(self, principal: str, *, since: float, within: float) -> None:
        """Nothing reads for the principal and its stream slot is free within `within` seconds of `since` (a
        monotonic time), and the slot was never free while a read for it went on."""
        seen = []
        while (now := self.blocked_and_streams(principal)) != (0, 0):
            seen.append(now)
            assert time.monotonic() - since < within, f"still reading after the hang-up: {seen[-5:]}"
            time.sleep(0.005)  # a poll of Redis's own figures, not a wait for the thing itself
        assert all(slots == 1 for blocked, slots in seen if blocked), seen


@contextlib.contextmanager
def web_without_workers(tmp_path: Path, **env: str) -> Iterator[Web]:
    """The web process with `env` on top of its settings; fails the test if its log shows an error, since a client
    hanging up is ordinary and nothing of it may show as one."""
    server = EmbeddedRedis(appendonly=False).start()
    settings = make_settings(f"redis://127.0.0.1:{server.port}")
    port = free_port()
    proc = Proc([sys.executable, "-m", "tasks_backend.cli", "web", "--workers", "1", "--bind", f"127.0.0.1:{port}"],
                settings_env(settings, **env), tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/healthz", proc.popen, tmp_path / "web.log", 60, "tasks-backend web")
        yield Web(base, redis.Redis.from_url(settings.redis_url, decode_responses=True), Keys(settings.key_prefix))
    except BaseException:
        print(proc.output()[-4000:])
        raise
    finally:
        proc.stop()
        server.stop()
    assert "Traceback" not in proc.output() and "Error handling request" not in proc.output(), proc.output()[-4000:]
