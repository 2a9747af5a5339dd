"""A2A push notifications: configs in Redis, the target guard, and one webhook POST.

Jobs without configs cost nothing: only a job that has a config is put on the `push_due` set, and
only the workers' delivery loop (`workers.push`) reads that set. Every key written here expires with
its job (`createdAt + ttlMs`); the due set is an index kept at the TTL ceiling like the sweeper's.

The guard refuses targets that resolve to loopback, link-local, private or otherwise non-global
addresses unless `push_allow_private` is set. It runs when a config is created (a clear error for
the caller) and again on every delivery, where the connection is pinned to the address that was
checked, so a DNS answer that changes in between cannot redirect a POST into the private network.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .domain import JobRecord
from .errors import InvalidParams
from .store import RedisStore, redis_errors

#: Configs one job may hold; each one is a webhook POST per event.
MAX_CONFIGS_PER_JOB = 10
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 4096


@dataclass(frozen=True)
class Cursor:
    """Where delivery to one config stands: the last event sent, and the retry state of the next."""

    after: str = "0-0"
    attempts: int = 0
    retry_at_ms: int = 0

    def to_json(self) -> str:
        return json.dumps({"after": self.after, "attempts": self.attempts, "retryAt": self.retry_at_ms})

    @classmethod
    def from_json(cls, raw: str) -> Cursor:
        data = json.loads(raw)
        return cls(str(data.get("after", "0-0")), int(data.get("attempts", 0)), int(data.get("retryAt", 0)))


class TargetRefused(InvalidParams):
    message = "The push notification URL is not allowed."


def _config_text(config: dict[str, Any], name: str, limit: int = MAX_SECRET_LENGTH) -> str | None:
    value = config.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit or "\r" in value or "\n" in value:
        raise InvalidParams(f"`{name}` must be a single-line string of at most {limit} characters.")
    return value


def normalize_config(config: Any, job_id: str) -> dict[str, Any]:
    """A TaskPushNotificationConfig as stored: `id`, `taskId`, `url`, optional `token`, `authentication`."""
    if not isinstance(config, dict):
        raise InvalidParams("A push notification config must be a JSON object.")
    url = _config_text(config, "url", MAX_URL_LENGTH)
    if url is None:
        raise InvalidParams("A push notification config needs a `url`.")
    out: dict[str, Any] = {"id": _config_text(config, "id", 256) or job_id, "taskId": job_id, "url": url}
    token = _config_text(config, "token")
    if token is not None:
        out["token"] = token
    auth = config.get("authentication")
    if auth is not None:
        if not isinstance(auth, dict):
            raise InvalidParams("`authentication` must be an object with `scheme` and `credentials`.")
        scheme = _config_text(auth, "scheme", 64)
        if scheme is None or not scheme.replace("-", "").isalnum():
            raise InvalidParams("`authentication.scheme` must name an HTTP auth scheme, such as Bearer.")
        out["authentication"] = {"scheme": scheme, "credentials": _config_text(auth, "credentials") or ""}
    return out


def resolve_target(url: str, allow_private: bool) -> tuple[str, str, int, str]:
    """(scheme, host, port, address to connect to) for an allowed webhook URL, or `TargetRefused`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("The push notification URL must be an absolute http or https URL.")
    if parts.username or parts.password:
        raise TargetRefused("Put credentials in `authentication`, not in the URL.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused("The push notification URL has an invalid port.") from exc
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused("The push notification host does not resolve.") from exc
    addresses = [str(info[4][0]) for info in infos]
    if not allow_private:
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            # `is_global` is false for loopback, link-local, private, shared (CGNAT), reserved and
            # unspecified ranges; multicast is refused separately because some of it counts as global.
            if not ip.is_global or ip.is_multicast:
                raise TargetRefused("The push notification URL points at a loopback, link-local or private "
                                    "address; the server is not configured to allow that.")
    return parts.scheme, parts.hostname, port, addresses[0]


def post_event(config: dict[str, Any], body: dict[str, Any], *, allow_private: bool, timeout_s: float) -> int:
    """POST one StreamResponse to a config's URL; returns the HTTP status (raises `OSError`/`TargetRefused`).

    Redirects are not followed: a 3xx is a failed delivery, never a second request elsewhere.
    """
    url = config["url"]
    scheme, host, port, address = resolve_target(url, allow_private)
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Content-Type": "application/json", "User-Agent": "tasks-backend-push"}
    auth = config.get("authentication")
    if auth:
        headers["Authorization"] = f"{auth['scheme']} {auth.get('credentials', '')}".strip()
    if config.get("token"):
        headers["X-A2A-Notification-Token"] = config["token"]
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout_s)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)

    # Connect to the address that passed the guard; Host and TLS SNI still use the name.
    def pinned(addr: tuple[str, int], timeout: float | None, source: Any = None) -> socket.socket:
        return socket.create_connection((address, addr[1]), timeout, source)

    conn._create_connection = pinned  # type: ignore[attr-defined]
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        response.read(64 * 1024)
        return response.status
    finally:
        conn.close()


class PushStore:
    """The A2A-only data kept beside a job: push configs, their delivery cursors, a client's contextId."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.redis = store.redis
        self.keys = store.keys

    # -- configs (web side) -------------------------------------------------------------
    def put(self, record: JobRecord, config: dict[str, Any], *, after: str, now_ms: int) -> dict[str, Any]:
        """Store (or replace) a config; delivery starts with the first event after `after`."""
        configs_key, cursors_key = self.keys.push_configs(record.id), self.keys.push_cursors(record.id)
        with redis_errors():
            existing = self.redis.hkeys(configs_key)
            if config["id"] not in existing and len(existing) >= MAX_CONFIGS_PER_JOB:
                raise InvalidParams(f"A task may have at most {MAX_CONFIGS_PER_JOB} push configs.")
            pipe = self.redis.pipeline(transaction=True)
            pipe.hset(configs_key, config["id"], json.dumps(config))
            pipe.hset(cursors_key, config["id"], Cursor(after=after).to_json())
            pipe.pexpireat(configs_key, record.expires_ms)
            pipe.pexpireat(cursors_key, record.expires_ms)
            pipe.zadd(self.keys.push_due(), {record.id: now_ms})
            pipe.pexpire(self.keys.push_due(), self.store.max_ttl_ms)
            pipe.execute()
        return config

    def get(self, job_id: str, config_id: str) -> dict[str, Any] | None:
        with redis_errors():
            raw = self.redis.hget(self.keys.push_configs(job_id), config_id)
        return json.loads(raw) if isinstance(raw, str) else None

    def configs(self, job_id: str) -> list[dict[str, Any]]:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.push_configs(job_id))
        return [json.loads(v) for _, v in sorted(raw.items())]

    def delete(self, job_id: str, config_id: str) -> bool:
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hdel(self.keys.push_configs(job_id), config_id)
            pipe.hdel(self.keys.push_cursors(job_id), config_id)
            removed, _ = pipe.execute()
        return bool(removed)

    def last_event_id(self, job_id: str) -> str:
        """The id of the job's newest feed entry (`0-0` if the feed is empty or gone)."""
        with redis_errors():
            rows = self.redis.xrevrange(self.keys.events(job_id), count=1)
        return str(rows[0][0]) if rows else "0-0"

    # -- contextId --------------------------------------------------------------------
    def set_context(self, record: JobRecord, context_id: str) -> None:
        with redis_errors():
            self.redis.set(self.keys.a2a_context(record.id), context_id, pxat=record.expires_ms)

    def contexts(self, job_ids: list[str]) -> dict[str, str]:
        """Each job's contextId: the one its client chose, else the job id itself."""
        if not job_ids:
            return {}
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.get(self.keys.a2a_context(job_id))
            values = pipe.execute()
        return {j: v if isinstance(v, str) and v else j for j, v in zip(job_ids, values, strict=True)}

    # -- delivery (worker side) ---------------------------------------------------------
    def due(self, now_ms: int, limit: int) -> list[str]:
        with redis_errors():
            return [str(m) for m in self.redis.zrangebyscore(self.keys.push_due(), "-inf", now_ms, 0, limit)]

    def cursors(self, job_id: str) -> dict[str, Cursor]:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.push_cursors(job_id))
        return {str(k): Cursor.from_json(str(v)) for k, v in raw.items()}

    def save_cursor(self, job_id: str, config_id: str, cursor: Cursor) -> None:
        """Advance a cursor, unless the config was deleted meanwhile (HSETXX-like, via a check)."""
        key = self.keys.push_cursors(job_id)
        with redis_errors():
            if self.redis.hexists(self.keys.push_configs(job_id), config_id):
                self.redis.hset(key, config_id, cursor.to_json())

    def reschedule(self, job_id: str, at_ms: int | None) -> None:
        self.store.schedule(self.keys.push_due(), job_id, at_ms)

    def try_claim(self, job_id: str, ttl_ms: int) -> str | None:
        """A short exclusive claim on delivering one job's events, so two workers never both post."""
        token = uuid.uuid4().hex
        with redis_errors():
            ok = self.redis.set(self.keys.lock(f"push:{job_id}"), token, nx=True, px=ttl_ms)
        return token if ok else None

    def release(self, job_id: str, token: str) -> None:
        key = self.keys.lock(f"push:{job_id}")
        with redis_errors():
            if self.redis.get(key) == token:
                self.redis.delete(key)
