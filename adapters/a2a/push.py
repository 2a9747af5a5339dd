"""What A2A keeps beside a job, in A2A's shapes: push-notification configs and a client's contextId.

The core stores both without reading them (`tasks_backend.push.subscriptions` subscriptions,
`tasks_backend.store.job_meta`);
this module gives them their A2A meaning: what a TaskPushNotificationConfig may hold, the headers a
receiver is sent, the StreamResponse bodies it receives (`wire`), and the task's contextId.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tasks_backend.errors import InvalidParams
from tasks_backend.model.domain import JobRecord
from tasks_backend.store.job_meta import JobMeta
from tasks_backend.store.jobs import RedisStore

from . import wire

#: The name A2A's push subscriptions are stored under (their format, for the delivery loop).
FORMAT = "a2a"
#: The job metadata field holding the contextId a client chose (absent: the job id is its context).
CONTEXT_FIELD = "a2a.contextId"
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 4096
#: What a stored secret (`token`, `authentication.credentials`) reads as, to its owner too: like a password
#: field, the same whatever its length.
MASK = "********"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_URL_CHARS = re.compile(r"[\x21-\x7e]+")


def _config_text(config: dict[str, Any], name: str, limit: int = MAX_SECRET_LENGTH, *,
                 header: bool = False) -> str | None:
    """A single-line string field; `header`: it is sent in an HTTP header, so latin-1 only."""
    value = config.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit or _CONTROL.search(value):
        raise InvalidParams(f"`{name}` must be a single-line string of at most {limit} characters.")
    try:
        value.encode("latin-1" if header else "utf-8")
    except UnicodeEncodeError:
        what = "Latin-1 characters (it is sent in an HTTP header)" if header else "valid Unicode"
        raise InvalidParams(f"`{name}` must contain only {what}.") from None
    return value


def normalize_config(config: Any, job_id: str) -> dict[str, Any]:
    """A TaskPushNotificationConfig as stored: `id`, `taskId`, `url`, optional `token`, `authentication`.

    Whatever can never be sent is refused here, not found out at delivery time: a URL that is not
    plain ASCII without spaces, and header values outside Latin-1.
    """
    if not isinstance(config, dict):
        raise InvalidParams("A push notification config must be a JSON object.")
    url = _config_text(config, "url", MAX_URL_LENGTH)
    if url is None:
        raise InvalidParams("A push notification config needs a `url`.")
    if not _URL_CHARS.fullmatch(url):
        raise InvalidParams("The push notification `url` must be ASCII without spaces; percent-encode the rest.")
    out: dict[str, Any] = {"id": _config_text(config, "id", 256) or job_id, "taskId": job_id, "url": url}
    token = _unmasked(_config_text(config, "token", header=True), "token")
    if token is not None:
        out["token"] = token
    auth = config.get("authentication")
    if auth is not None:
        if not isinstance(auth, dict):
            raise InvalidParams("`authentication` must be an object with `scheme` and `credentials`.")
        scheme = _config_text(auth, "scheme", 64, header=True)
        if scheme is None or not scheme.replace("-", "").isalnum() or not scheme.isascii():
            raise InvalidParams("`authentication.scheme` must name an HTTP auth scheme, such as Bearer.")
        credentials = _unmasked(_config_text(auth, "credentials", header=True), "authentication.credentials")
        out["authentication"] = {"scheme": scheme, "credentials": credentials or ""}
    return out


def _unmasked(value: str | None, name: str) -> str | None:
    # A config read back and sent again unchanged would store the mask as the secret and break the
    # receiver's authentication without a word.
    if value == MASK:
        raise InvalidParams(f"`{name}` is the mask a stored secret reads as; send the secret itself.")
    return value


def shown(config: dict[str, Any]) -> dict[str, Any]:
    """A stored config as it is answered: every secret masked, to whoever asks (the owner included)."""
    out = dict(config)
    if out.get("token"):
        out["token"] = MASK
    auth = out.get("authentication")
    if isinstance(auth, dict) and auth.get("credentials"):
        out["authentication"] = {**auth, "credentials": MASK}
    return out


def context_of(record_id: str, meta: Mapping[str, str]) -> str:
    return meta.get(CONTEXT_FIELD) or record_id


class Contexts:
    """Each task's contextId: the one its client chose, else the task id itself."""

    def __init__(self, store: RedisStore) -> None:
        self.meta = JobMeta(store)

    def set(self, record: JobRecord, context_id: str) -> None:
        self.meta.put(record, CONTEXT_FIELD, context_id)

    def of(self, job_ids: list[str]) -> dict[str, str]:
        return {j: v or j for j, v in self.meta.get_many(job_ids, CONTEXT_FIELD).items()}


class A2APushFormat:
    """A2A push notifications: one StreamResponse per change, with the config's token and credentials."""

    def bodies(self, record: JobRecord, meta: Mapping[str, str]) -> list[dict[str, Any]]:
        return wire.updates(record, context_of(record.id, meta))

    def headers(self, subscription: Mapping[str, Any]) -> dict[str, str]:
        headers: dict[str, str] = {}
        auth = subscription.get("authentication")
        if auth:
            headers["Authorization"] = f"{auth['scheme']} {auth.get('credentials', '')}".strip()
        if subscription.get("token"):
            headers["X-A2A-Notification-Token"] = subscription["token"]
        return headers
