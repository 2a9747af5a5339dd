"""`POST /v1/remote-push`: where remote A2A agents send push notifications about the tasks jobs wait on.

The caller is a remote agent, not a principal: it is known by the token the job's message gave it
(`X-A2A-Notification-Token`, see `tasks_backend.remote.push`), so the path skips bearer authentication. A push
only moves the job to the front of the remote schedule; the task is then read from the agent as on any poll.
The body is not read: whatever it says is learnt again from the agent itself.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, request

from tasks_backend.errors import JobNotFound
from tasks_backend.remote.push import job_of
from tasks_backend.service.runtime import Runtime

from ..protocol import Adapter

PATH = "/v1/remote-push"
NOTIFICATION_HEADER = "X-A2A-Notification-Token"

bp = Blueprint("remote_push", __name__)


@bp.post(PATH)
def remote_push() -> Response:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    token = request.headers.get(NOTIFICATION_HEADER) or ""
    job_id = job_of(runtime.store.remote_push_key(), token) if token else None
    if job_id is None:
        raise JobNotFound()  # a token not made here reads like a job that is not there
    runtime.store.watch_remote(job_id, 0)
    return Response(status=204)


def openapi_paths(problem: dict[str, Any]) -> dict[str, Any]:
    """The path for `/openapi.json`; `problem`: the document's error answers (404 among them)."""
    return {PATH: {"post": {
        "summary": "A remote agent's push notification about a task a job waits on",
        "security": [],
        "parameters": [{"name": NOTIFICATION_HEADER, "in": "header", "required": True, "schema": {"type": "string"},
                        "description": "The token the job's message gave the agent."}],
        "responses": {"204": {"description": "The job looks at its remote task now"}, **problem}}}}


ADAPTER = Adapter("remote_push", bp, public_paths=frozenset({PATH}))
