"""Structured logs: one JSON object per line, carrying `taskId` and `operation` while a job runs.

Only the message and a few known fields are written, never a record's `extra` wholesale, so a job's
params cannot slip into a log line by accident; anything that looks like a bearer token or a basic-auth
pair in a message is masked as a last line of defence. `LOG_FORMAT=text` gives plain lines for people.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

_task_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("task_id", default=None)
_operation: contextvars.ContextVar[str | None] = contextvars.ContextVar("operation", default=None)
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

_SECRETS = re.compile(r"(?i)(bearer\s+|authorization[\"']?\s*[:=]\s*[\"']?(?:bearer\s+)?|basic[-_]auth[=:\s]+"
                      r"|token[\"']?\s*[:=]\s*[\"']?)([^\s\"',;]+)")
#: The WSGI environ key where the web entrance leaves the client's address (behind trusted reverse proxies, the
#: forwarded client's): the access log shows it.
CLIENT_ADDRESS = "tasks_backend.client_address"
#: Libraries that log every request at INFO; their lines add nothing an access log does not.
#: Loggers kept at WARNING. `celery.worker.strategy` logs "Received task" for every job: a worker says
#: one line per job at INFO (Celery's "succeeded" or "failed" line, with the runtime), not two.
_QUIET = ("httpx", "httpcore", "celery.worker.strategy")


_SECRET_HINTS = ("bearer", "authorization", "basic", "token", "/ui/answer/")
#: A one-time answer link's path is its credential (`adapters.ui.answer_link`): access lines show it redacted.
_LINK = re.compile(r"(/ui/answer/)([^\s\"'?/]+)")


def mask_secrets(text: str) -> str:
    # Most lines (every access log line) carry none of the words the pattern starts with: a few
    # substring checks spare them the regex.
    lowered = text.lower()
    if not any(hint in lowered for hint in _SECRET_HINTS):
        return text
    return _LINK.sub(r"\1[redacted]", _SECRETS.sub(lambda m: m.group(1) + "[redacted]", text))


def bind(task_id: str | None, operation: str | None) -> None:
    """Attach a job to every log line of the current thread or task until `bind(None, None)`."""
    _task_id.set(task_id)
    _operation.set(operation)


@contextmanager
def job_context(task_id: str, operation: str | None) -> Iterator[None]:
    tokens = (_task_id.set(task_id), _operation.set(operation))
    try:
        yield
    finally:
        _task_id.reset(tokens[0])
        _operation.reset(tokens[1])


def bind_request(request_id: str | None) -> contextvars.Token[str | None]:
    """Attach a web request's id to every log line of the current thread until `unbind_request`."""
    return _request_id.set(request_id)


def unbind_request(token: contextvars.Token[str | None]) -> None:
    _request_id.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": mask_secrets(record.getMessage()),
            "pid": record.process,
        }
        task_id = getattr(record, "taskId", None) or _task_id.get()
        operation = getattr(record, "operation", None) or _operation.get()
        if task_id:
            out["taskId"] = task_id
        if operation:
            out["operation"] = operation
        request_id = _request_id.get()
        if request_id:
            out["requestId"] = request_id
        if record.exc_info:
            out["exception"] = mask_secrets(self.formatException(record.exc_info))
        return _LINE(out)


#: `json.dumps` with options builds its encoder on every call (every log line: the access line of each request
#: too): this one is built once.
_LINE = json.JSONEncoder(ensure_ascii=False).encode


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = mask_secrets(super().format(record))
        task_id = getattr(record, "taskId", None) or _task_id.get()
        if task_id:
            line += f" taskId={task_id} operation={getattr(record, 'operation', None) or _operation.get()}"
        request_id = _request_id.get()
        if request_id:
            line += f" requestId={request_id}"
        return line


def configure_logging(level: str | None = None, fmt: str | None = None) -> None:
    """Send every process's logs to stderr in one format; safe to call more than once."""
    fmt = (fmt or os.environ.get("LOG_FORMAT") or "json").lower()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    handler.set_name("tasks_backend")
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == "tasks_backend":
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel((level or os.environ.get("LOG_LEVEL") or "INFO").upper())
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    _bind_celery_signals()


def _bind_celery_signals() -> None:
    """In a worker, every line logged while the runner task runs names its job.

    The task id is the job id; the operation travels as the message's `shadow` name.
    """
    from celery import signals

    def started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
        request = getattr(task, "request", None)
        bind(task_id, getattr(request, "shadow", None) if request is not None else None)

    def finished(**_: Any) -> None:
        bind(None, None)

    signals.task_prerun.connect(started, weak=False, dispatch_uid="tasks_backend.serving.logs.prerun")
    signals.task_postrun.connect(finished, weak=False, dispatch_uid="tasks_backend.serving.logs.postrun")


def gunicorn_logconfig() -> dict[str, Any]:
    """`logconfig_dict` for gunicorn: its error and access logs, and the app's, as JSON (or text) lines."""
    fmt = (os.environ.get("LOG_FORMAT") or "json").lower()
    formatter = ("tasks_backend.serving.logs.TextFormatter" if fmt == "text"
                 else "tasks_backend.serving.logs.JsonFormatter")
    handler = {"class": "logging.StreamHandler", "formatter": "tasks_backend", "stream": "ext://sys.stderr"}
    level = (os.environ.get("LOG_LEVEL") or "INFO").upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"tasks_backend": {"()": formatter}},
        "handlers": {"tasks_backend": handler},
        "root": {"level": level, "handlers": ["tasks_backend"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["tasks_backend"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["tasks_backend"], "propagate": False},
            **{name: {"level": "WARNING"} for name in _QUIET},
        },
    }
