"""Being told when a remote MCP task changes, instead of waiting for the next poll: the 2026-07-28 tasks
extension's `subscriptions/listen` (a held SSE stream of `notifications/tasks` for the task ids it names).

A `Listener` lives beside each `RemotePoller`: the poller names every 2026 task it looks at; the listener holds
one stream per remote URL (reopened when it ends or a task is added) and, when a task ends or asks for input,
puts its job at the front of the remote schedule, as an A2A push does. The poller then reads the task as on any
poll, so a notification can only make a look come sooner. A server that refuses the listen, or acknowledges
none of the tasks, is not asked again for `REFUSED_S`: its tasks are polled only.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..config import Settings
from ..store.jobs import RedisStore
from .access import END, EventStream, RemoteChannel
from .mcp import MODERN, MODERN_META, modern_status

log = logging.getLogger(__name__)
#: How many tasks one stream names (this project's own server takes up to 32 per listen).
MAX_TASKS = 32
#: How long a URL that refused to listen is only polled (s).
REFUSED_S = 600.0
#: How long a held stream may stay silent before it is opened again (s).
QUIET_S = 60.0
#: How long to wait before listening again to a remote that could not be reached (s).
RETRY_S = 5.0


class Listener:
    def __init__(self, store: RedisStore, settings: Settings) -> None:
        self.store, self.channel = store, RemoteChannel(settings)
        self.ack_s = settings.remote_timeout_s
        self._lock = threading.Lock()
        #: url -> {task id: job id} of the tasks to be told about.
        self._wanted: dict[str, dict[str, str]] = {}
        #: url -> the stream held for it and the task ids it names.
        self._held: dict[str, tuple[EventStream | None, set[str]]] = {}
        self._refused: dict[str, float] = {}
        self._stopped = threading.Event()

    def follow(self, url: str, task_id: str, job_id: str) -> None:
        """Be told when `task_id` at `url` ends or asks for input, and then wake `job_id`'s look at it."""
        with self._lock:
            if self._stopped.is_set() or self._refused.get(url, 0.0) > time.monotonic():
                return
            wanted = self._wanted.setdefault(url, {})
            if task_id in wanted:
                return
            wanted[task_id] = job_id
            held = self._held.get(url)
            if held is None:
                self._held[url] = (None, set())
                threading.Thread(target=self._listen, args=(url,), daemon=True, name="remote-listen").start()
            elif task_id not in held[1] and held[0] is not None and len(held[1]) < MAX_TASKS:
                held[0].close()  # opened again at once, naming this task too

    def close(self) -> None:
        self._stopped.set()
        with self._lock:
            streams = [stream for stream, _ in self._held.values() if stream is not None]
        for stream in streams:
            stream.close()
        self.channel.close()

    def _listen(self, url: str) -> None:
        try:
            while not self._stopped.is_set():
                with self._lock:
                    tasks = dict(list(self._wanted.get(url, {}).items())[:MAX_TASKS])
                    if not tasks:
                        del self._held[url]
                        return
                    stream = self.channel.stream(url, "subscriptions/listen", {
                        "notifications": {"taskIds": list(tasks)}, "_meta": MODERN_META},
                        {"MCP-Protocol-Version": MODERN, "Mcp-Method": "subscriptions/listen"}, read_s=QUIET_S)
                    self._held[url] = (stream, set(tasks))
                try:
                    if not self._hold(url, stream, tasks):
                        return
                finally:
                    stream.close()
        except Exception:  # a listener is an optimisation: polling goes on whatever happens here
            log.exception("listening to %s failed", url)
            self._refuse(url)

    def _hold(self, url: str, stream: EventStream, tasks: dict[str, str]) -> bool:
        """Read one stream until it ends; False if the server does not listen to these tasks."""
        ack = stream.next(self.ack_s)
        if ack is END and stream.status == 0:  # unreachable for now: not a refusal
            self._stopped.wait(RETRY_S)
            return True
        accepted = _acknowledged(ack)
        if accepted is None or not accepted & set(tasks):
            log.info("%s does not notify task changes (HTTP %s): polling its tasks only", url, stream.status)
            self._refuse(url)
            return False
        self._drop(url, set(tasks) - accepted)  # unknown there (or not ours): polled only
        while not self._stopped.is_set():
            message = stream.next(QUIET_S)
            if message is None or message is END or message.get("id") == stream.id:
                return True  # quiet too long, closed to add a task, or ended by the server: open it again
            params = message.get("params")
            if message.get("method") != "notifications/tasks" or not isinstance(params, dict):
                continue
            task_id = str(params.get("taskId"))
            status = modern_status(params)
            if task_id in tasks and (status.terminal or status.state == "input_required"):
                self.store.watch_remote(tasks[task_id], 0)
                self._drop(url, {task_id})
        return False

    def _drop(self, url: str, task_ids: set[str]) -> None:
        with self._lock:
            wanted = self._wanted.get(url, {})
            for task_id in task_ids:
                wanted.pop(task_id, None)

    def _refuse(self, url: str) -> None:
        with self._lock:
            self._refused[url] = time.monotonic() + REFUSED_S
            self._wanted.pop(url, None)
            self._held.pop(url, None)


def _acknowledged(message: dict[str, Any] | None) -> set[str] | None:
    """The task ids a `notifications/subscriptions/acknowledged` accepted; None if `message` is not one."""
    if not message or message.get("method") != "notifications/subscriptions/acknowledged":
        return None
    notifications = (message.get("params") or {}).get("notifications")
    ids = notifications.get("taskIds") if isinstance(notifications, dict) else None
    return {str(i) for i in ids} if isinstance(ids, list) else set()

