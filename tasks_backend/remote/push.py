"""Push notifications from remote agents: the token a job's A2A message asks the agent to send back, and the
job it names. A push only says "look now": the receiver (`adapters/http/remote_push.py`) puts the job at the
front of the remote schedule, and the poller reads the task from the agent as always, so a forged or replayed
push can cost a read, never change a job.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from ..config import Settings
from ..store.jobs import RedisStore


def _signature(key: str, job_id: str) -> str:
    return hmac.new(key.encode(), f"remote-push:{job_id}".encode(), hashlib.sha256).hexdigest()


def token_for(key: str, job_id: str) -> str:
    return f"{job_id}.{_signature(key, job_id)}"


def job_of(key: str, token: str) -> str | None:
    """The job a token was made for, or None if it was not made with `key` (compared in constant time)."""
    job_id, _, signature = token.rpartition(".")
    if not job_id or not hmac.compare_digest(signature.encode(), _signature(key, job_id).encode()):
        return None
    return job_id


def push_config(settings: Settings, store: RedisStore, job_id: str) -> dict[str, Any] | None:
    """The A2A TaskPushNotificationConfig to ask for, or None when no push URL is configured."""
    if not settings.remote_push_url:
        return None
    return {"url": settings.remote_push_url, "token": token_for(store.remote_push_key(), job_id)}
