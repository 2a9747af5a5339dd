"""A2A push notifications: configs in Redis, the target guard, and one webhook POST.

Jobs without configs cost nothing: only a job that has a config is put on the `push_due` set, and
only the workers' delivery loop (`workers.push`) reads that set. Every key written here expires with
its job (`createdAt + ttlMs`); the due set is an index kept at the TTL ceiling like the sweeper's.

The guard refuses targets that resolve to loopback, link-local, private or otherwise non-global
addresses (also when written as an IPv6 address that embeds or translates one) unless
`push_allow_private` is set. It runs when a config is created (a clear error for the caller) and
again on every delivery, where the connection is pinned to the address that was checked, so a DNS
answer that changes in between cannot redirect a POST into the private network.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from .domain import JobRecord, JobState
from .errors import InvalidParams
from .store import Event, RedisStore, redis_errors

#: Configs one job may hold; each one is a webhook POST per event.
MAX_CONFIGS_PER_JOB = 10
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 4096
#: Feed entries read per job and pass; a longer backlog is read on the next pass, at once.
FEED_BATCH = 100
#: Bytes of a receiver's answer that are read (and thrown away) before the connection is closed.
MAX_ANSWER_BYTES = 64 * 1024

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_URL_CHARS = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True)
class Cursor:
    """Where delivery to one config stands: the last event sent, and the retry state of the next.

    `done`: the job's final state was delivered to this config or given up on; nothing is left.
    `tag` is new with every `put`, so a config replaced during a delivery pass is not overwritten by
    the cursor that pass computed for the config it replaced.
    """

    after: str = "0-0"
    attempts: int = 0
    retry_at_ms: int = 0
    done: bool = False
    tag: str = ""

    def to_json(self) -> str:
        return json.dumps({"after": self.after, "attempts": self.attempts, "retryAt": self.retry_at_ms,
                           "done": self.done, "tag": self.tag})

    @classmethod
    def from_json(cls, raw: str) -> Cursor:
        data = json.loads(raw)
        return cls(str(data.get("after", "0-0")), int(data.get("attempts", 0)), int(data.get("retryAt", 0)),
                   bool(data.get("done", False)), str(data.get("tag", "")))


def event_key(event_id: str) -> tuple[int, int]:
    """A stream entry id as a number pair, for ordering (`0-0` is before everything)."""
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


class TargetRefused(InvalidParams):
    message = "The push notification URL is not allowed."


# -- configs -----------------------------------------------------------------------------------
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
    token = _config_text(config, "token", header=True)
    if token is not None:
        out["token"] = token
    auth = config.get("authentication")
    if auth is not None:
        if not isinstance(auth, dict):
            raise InvalidParams("`authentication` must be an object with `scheme` and `credentials`.")
        scheme = _config_text(auth, "scheme", 64, header=True)
        if scheme is None or not scheme.replace("-", "").isalnum() or not scheme.isascii():
            raise InvalidParams("`authentication.scheme` must name an HTTP auth scheme, such as Bearer.")
        out["authentication"] = {"scheme": scheme,
                                 "credentials": _config_text(auth, "credentials", header=True) or ""}
    return out


# -- the guard ---------------------------------------------------------------------------------
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052 well-known prefix: the last 32 bits are IPv4
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 IPv4-translated addresses
_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible ::a.b.c.d (also :: and ::1)
# RFC 8215 local-use translation prefix: each network chooses where in it the IPv4 address sits, so
# the address cannot be read back; it is not globally reachable anyway.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def _reaches(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses a connection to `ip` may end up at: IPv4 ones it embeds or is translated to, and
    itself unless it is only another way to write an IPv4 address (mapped, NAT64, IPv4-compatible)."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if any(ip in net for net in (_NAT64, _SIIT, _COMPATIBLE)):
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    out: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)  # (server, client); the client address is already de-obfuscated
    return out


def _allowed(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return False
        candidates = _reaches(ip)
    # `is_global` is false for loopback, link-local, private, shared (CGNAT), reserved and unspecified
    # ranges; multicast is refused separately because some of it counts as global.
    return all(c.is_global and not c.is_multicast for c in candidates)


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
    if not allow_private and not all(_allowed(a) for a in addresses):
        raise TargetRefused("The push notification URL points at a loopback, link-local or private "
                            "address; the server is not configured to allow that.")
    return parts.scheme, parts.hostname, port, addresses[0]


# -- one POST ----------------------------------------------------------------------------------
class _Deadline:
    """A total time limit on one HTTP exchange.

    Socket timeouts bound each read, not their sum: a receiver sending a byte a second would hold
    the connection for as long as it likes. At the deadline a timer shuts the socket down, which
    ends any read or write in progress. The lock keeps the timer off a descriptor that was closed
    (and may have been reused) once the exchange ended.
    """

    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds
        self.fired = False
        self._fd = -1
        self._over = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        left = self.expires - time.monotonic()
        if left <= 0:
            raise TimeoutError("the push deadline passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._fd = sock.fileno()

    def _fire(self) -> None:
        with self._lock:
            if self._over:
                return
            self.fired = True
            if self._fd >= 0:
                sock = socket.socket(fileno=self._fd)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                finally:
                    sock.detach()

    def __enter__(self) -> _Deadline:
        self._timer = threading.Timer(max(0.0, self.expires - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._over = True
        if self._timer is not None:
            self._timer.cancel()


def post_event(config: dict[str, Any], body: dict[str, Any], *, allow_private: bool, timeout_s: float) -> int:
    """POST one StreamResponse to a config's URL; returns the HTTP status.

    The whole exchange (connect, send, status line, headers and body) ends within `timeout_s`, or
    raises `TimeoutError`. Redirects are not followed: a 3xx is a failed delivery, never a second
    request elsewhere. Raises `TargetRefused`, `OSError` or `http.client.HTTPException` otherwise.
    """
    deadline = _Deadline(timeout_s)
    url = config["url"]
    scheme, host, port, address = resolve_target(url, allow_private)
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # `Connection: close`: the answer ends when the receiver closes, so reading it cannot wait on keep-alive.
    headers = {"Content-Type": "application/json", "User-Agent": "tasks-backend-push", "Connection": "close"}
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
        sock = socket.create_connection((address, addr[1]), deadline.remaining(), source)
        deadline.watch(sock)
        return sock

    conn._create_connection = pinned  # type: ignore[attr-defined]
    try:
        with deadline:
            conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
            response = conn.getresponse()
            response.read(MAX_ANSWER_BYTES)
            return response.status
    except (OSError, http.client.HTTPException) as exc:
        if deadline.fired:
            raise TimeoutError(f"no complete answer within {timeout_s:g} s") from exc
        raise
    finally:
        conn.close()


# -- Redis -------------------------------------------------------------------------------------
# ARGV: how many. The due jobs and Redis's own clock (ms), which every worker process shares.
_DUE = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))}
"""

# KEYS: lock. ARGV: token. Compare-and-delete.
_RELEASE = r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: job, configs, cursors, lock. ARGV: lock token, then (config id, cursor as read, new cursor)...
# Saves each cursor that nobody changed since it was read, and only while its config exists (deleted
# or replaced configs are left alone), gives the cursors the job's expiry, and releases the lock.
# Returns -1 when another worker holds the lock (nothing written), 1 when a config was added, changed
# or replaced during the pass (look again at once), else 0. Applied twice, the second run finds the
# lock gone and every cursor already saved: it writes nothing.
_FINISH = r"""
local lock = redis.call('GET', KEYS[4])
if lock and lock ~= ARGV[1] then return -1 end
local h = redis.call('HMGET', KEYS[1], 'created', 'ttl')
local changed, seen = 0, {}
for i = 2, #ARGV, 3 do
  local id, old, new = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  seen[id] = true
  if h[1] and redis.call('HEXISTS', KEYS[2], id) == 1 then
    local cur = redis.call('HGET', KEYS[3], id) or ''
    if cur ~= old then
      changed = 1
    elseif new ~= old then
      redis.call('HSET', KEYS[3], id, new)
    end
  end
end
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not seen[id] then changed = 1 end
end
if h[1] then redis.call('PEXPIREAT', KEYS[3], tonumber(h[1]) + tonumber(h[2])) end
if lock then redis.call('DEL', KEYS[4]) end
return changed
"""


@dataclass(frozen=True)
class Pending:
    """What one delivery pass read of a job, in one snapshot: the feed after the oldest cursor, then
    the record (so the record is at least as new as every event read) and the raw cursors (to save
    them only if nobody changed them meanwhile)."""

    job_id: str
    record: JobRecord | None
    configs: dict[str, dict[str, Any]]
    cursors: dict[str, str]
    context: str
    events: list[Event]
    feed_exists: bool

    def cursor(self, config_id: str) -> Cursor:
        raw = self.cursors.get(config_id)
        return Cursor.from_json(raw) if raw else Cursor()


def _event(entry_id: str, f: dict[str, str]) -> Event:
    return Event(entry_id, JobState(f["s"]), int(f["u"]), f.get("m"),
                 float(f["d"]) if "d" in f else None, float(f["t"]) if "t" in f else None)


class PushStore:
    """The A2A-only data kept beside a job: push configs, their delivery cursors, a client's contextId."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.redis = store.redis
        self.keys = store.keys
        self._due = self.redis.register_script(_DUE)
        self._release = self.redis.register_script(_RELEASE)
        self._finish = self.redis.register_script(_FINISH)

    # -- configs (web side) -------------------------------------------------------------
    def put(self, record: JobRecord, config: dict[str, Any], *, after: str, now_ms: int = 0) -> dict[str, Any]:
        """Store (or replace) a config; delivery starts with the first event after `after`.

        A config put on a finished job has nothing ahead of it. The job is due at once (score 0, not
        this host's clock, which the workers may not share); `now_ms` is accepted for older callers.
        """
        configs_key, cursors_key = self.keys.push_configs(record.id), self.keys.push_cursors(record.id)
        cursor = Cursor(after=after, done=record.terminal, tag=uuid.uuid4().hex[:12])
        with redis_errors():
            existing = self.redis.hkeys(configs_key)
            if config["id"] not in existing and len(existing) >= MAX_CONFIGS_PER_JOB:
                raise InvalidParams(f"A task may have at most {MAX_CONFIGS_PER_JOB} push configs.")
            pipe = self.redis.pipeline(transaction=True)
            pipe.hset(configs_key, config["id"], json.dumps(config))
            pipe.hset(cursors_key, config["id"], cursor.to_json())
            pipe.pexpireat(configs_key, record.expires_ms)
            pipe.pexpireat(cursors_key, record.expires_ms)
            pipe.zadd(self.keys.push_due(), {record.id: 0})
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
    def due(self, limit: int) -> tuple[int, list[str]]:
        """(Redis's time in ms, up to `limit` jobs due by then)."""
        with redis_errors():
            now, ids = self._due(keys=[self.keys.push_due()], args=[limit])
        return int(now), [str(i) for i in ids]

    def claim_many(self, job_ids: list[str], token: str, lease_ms: int, now_ms: int) -> list[str]:
        """Lock each job for this pass; the ones won are also moved `lease_ms` ahead in the due set, so
        no loop polls them while they are in flight (and a pass that dies is retried after the lease)."""
        if not job_ids:
            return []
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.set(self.keys.push_lock(job_id), token, nx=True, px=lease_ms)
            won = [j for j, ok in zip(job_ids, pipe.execute(), strict=True) if ok]
            if won:
                self.redis.zadd(self.keys.push_due(), dict.fromkeys(won, now_ms + lease_ms), xx=True)
        return won

    def cursors(self, job_id: str) -> dict[str, Cursor]:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.push_cursors(job_id))
        return {str(k): Cursor.from_json(str(v)) for k, v in raw.items()}

    def try_claim(self, job_id: str, ttl_ms: int) -> str | None:
        """A short exclusive claim on delivering one job's events, so two workers never both post."""
        token = uuid.uuid4().hex
        with redis_errors():
            ok = self.redis.set(self.keys.push_lock(job_id), token, nx=True, px=ttl_ms)
        return token if ok else None

    def release(self, job_id: str, token: str) -> None:
        with redis_errors():
            self._release(keys=[self.keys.push_lock(job_id)], args=[token])

    def read(self, job_id: str) -> Pending:
        """The configs, cursors, feed and record of one job, as one pass needs them (two round trips)."""
        k = self.keys
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hgetall(k.push_configs(job_id))
            pipe.hgetall(k.push_cursors(job_id))
            raw_configs, cursors = pipe.execute()
            configs = {str(i): json.loads(v) for i, v in raw_configs.items()}
            open_cursors = [Cursor.from_json(cursors[i]) if i in cursors else Cursor() for i in configs]
            open_cursors = [c for c in open_cursors if not c.done]
            if not open_cursors:
                return Pending(job_id, None, configs, cursors, job_id, [], False)
            oldest = min((c.after for c in open_cursors), key=event_key)
            pipe = self.redis.pipeline(transaction=True)
            pipe.xread({k.events(job_id): oldest}, count=FEED_BATCH)
            pipe.exists(k.events(job_id))
            pipe.hgetall(k.job(job_id))
            pipe.get(k.a2a_context(job_id))
            feed, exists, raw_job, context = pipe.execute()
        entries = [e for _stream, rows in feed or [] for e in rows]
        record = JobRecord.from_hash(job_id, raw_job) if raw_job else None
        return Pending(job_id, record, configs, cursors, context or job_id,
                       [_event(i, f) for i, f in entries], bool(exists))

    def finish(self, pending: Pending, token: str, cursors: dict[str, Cursor], next_at_ms: int | None) -> None:
        """Save a pass's cursors, set when the job is next due (None: done with it), release the lock.

        The due set changes first: a config added meanwhile is then either seen by the script (which
        puts the job back at once) or added after the change, with its own due entry."""
        k = self.keys
        args: list[str] = [token]
        for config_id in pending.configs:
            old = pending.cursors.get(config_id, "")
            new = cursors[config_id].to_json() if config_id in cursors else old
            args += [config_id, old, new]
        keys = [k.job(pending.job_id), k.push_configs(pending.job_id), k.push_cursors(pending.job_id),
                k.push_lock(pending.job_id)]
        with redis_errors():
            self._schedule(pending.job_id, next_at_ms)
            if int(self._finish(keys=keys, args=args)) == 1:
                self._schedule(pending.job_id, 0)

    def _schedule(self, job_id: str, at_ms: int | None) -> None:
        pipe = self.redis.pipeline(transaction=False)
        if at_ms is None:
            pipe.zrem(self.keys.push_due(), job_id)
        else:
            pipe.zadd(self.keys.push_due(), {job_id: at_ms})
            pipe.pexpire(self.keys.push_due(), self.store.max_ttl_ms)  # it may have expired meanwhile
        pipe.execute()
