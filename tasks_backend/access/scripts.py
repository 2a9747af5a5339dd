"""The limits' Redis scripts, and the runner they go through.

Rule: every key a script writes has a TTL, time comes from Redis (`TIME`), and a script applied twice with the same
nonce gives the same outcome, since the client retries a command whose reply was lost. The scripts stay together
here so that they can move as one onto the store's script runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from ..store.connect import redis_errors

#: Counts the owner's unfinished jobs: those known unfinished at the last prune, plus every job indexed since.
#: KEYS: unfinished set, prune mark, owner index (from the 2nd).
ACTIVE_COUNT_LUA = """
local function active(k)
  local mark = redis.call('GET', KEYS[k + 1])
  return redis.call('SCARD', KEYS[k]) + redis.call('ZCOUNT', KEYS[k + 2], mark and ('(' .. mark) or '-inf', '+inf')
end
"""

#: The rate hash KEYS[1] keeps the theoretical arrival time `tat` (µs) of the next request, and the fields given
#: after it; it lives until that time has passed (it then says nothing a missing hash would not).
_KEEP_TAT_FN = """
local function keep_tat(now, tat, ...)
  redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat), ...)
  redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now) / 1000) + 1000)
end
"""

#: KEYS: rate hash, unfinished set, prune mark, owner index (all the owner's: one Redis Cluster slot).
#: ARGV: limit, window (µs), nonce, requests wanted at once.
#: Answers {"granted remaining retry_us reset_us" or "" (no rate limit), unfinished job count, Redis's time in ms}.
RATE_LUA = ACTIVE_COUNT_LUA + _KEEP_TAT_FN + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local active = active(2)
local now_ms = math.floor(now / 1000)
local limit = tonumber(ARGV[1])
if limit <= 0 then return {'', active, now_ms} end
local st = redis.call('HMGET', KEYS[1], 'tat', 'n', 'r')
if st[2] == ARGV[3] and st[3] then return {st[3], active, now_ms} end
local window = tonumber(ARGV[2])
local interval = window / limit
local tat = math.max(tonumber(st[1]) or 0, now)
local fit = math.floor((window - (tat - now)) / interval)
local answer
if fit < 1 then
  answer = '0 0 ' .. string.format('%.0f', tat + interval - now - window) .. ' ' .. string.format('%.0f', tat - now)
else
  local granted = math.min(fit, tonumber(ARGV[4]))
  tat = tat + granted * interval
  answer = granted .. ' ' .. (fit - granted) .. ' 0 ' .. string.format('%.0f', tat - now)
end
keep_tat(now, tat, 'n', ARGV[3], 'r', answer)
return {answer, active, now_ms}
"""

#: KEYS: rate hash. ARGV: limit, window (µs), nonce, requests' worth to charge.
#: Charges the extra work of a request already admitted, past the limit if need be: the requests that follow are
#: refused until the debt has refilled. Applied twice it charges once (`cn`: the last charge's nonce).
CHARGE_LUA = _KEEP_TAT_FN + """
local limit = tonumber(ARGV[1])
if limit <= 0 or redis.call('HGET', KEYS[1], 'cn') == ARGV[3] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = math.max(tonumber(redis.call('HGET', KEYS[1], 'tat')) or 0, now)
keep_tat(now, tat + tonumber(ARGV[4]) * tonumber(ARGV[2]) / limit, 'cn', ARGV[3])
return 1
"""

#: KEYS: failure hash (c: count, e: end of the window in ms, n: last nonce). ARGV: window (ms), nonce.
#: Answers {failures in this window, ms left of it}.
AUTH_FAIL_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = tonumber(redis.call('HGET', KEYS[1], 'e'))
if not ends or ends <= now then
  redis.call('DEL', KEYS[1])
  ends = now + tonumber(ARGV[1])
  redis.call('HSET', KEYS[1], 'e', ends)
  redis.call('PEXPIREAT', KEYS[1], ends)
end
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'c', 1)
  redis.call('HSET', KEYS[1], 'n', ARGV[2])
end
return {tonumber(redis.call('HGET', KEYS[1], 'c')), ends - now}
"""

#: KEYS: unfinished set, prune mark, owner index.
COUNT_LUA = ACTIVE_COUNT_LUA + "return active(1)"

#: KEYS: streams zset. ARGV: limit, lease (ms), stream id. Answers {1, 0} (held) or {0, ms until a lease ends}.
STREAM_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[3]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now + 1000)
return {1, 0}
"""


class LimitScripts:
    """Runs the scripts above by their SHA: loaded at first use, and again after a Redis restart lost them."""

    def __init__(self, client: redis.Redis) -> None:
        #: The client the scripts run on; the limits send their plain commands through it too.
        self.client = client
        self._sha: dict[str, str] = {}

    def eval(self, source: str, keys: list[str], *args: Any) -> Any:
        """Run `source` over `keys` with `args`; its reply, or `StoreUnavailable` with Redis unreachable."""
        with redis_errors():
            sha = self._sha.get(source)
            if sha is not None:
                try:
                    return self.client.evalsha(sha, len(keys), *keys, *args)
                except redis.exceptions.NoScriptError:
                    pass
            sha = self._sha[source] = str(self.client.script_load(source))
            return self.client.evalsha(sha, len(keys), *keys, *args)

    def eval_with(self, source: str, keys: list[str], args: tuple[Any, ...], also: Callable[[Any], None]) -> list[Any]:
        """A script and the commands `also` adds, in one round trip (on a Redis Cluster, one per slot)."""
        with redis_errors():
            for attempt in (1, 2):
                if attempt == 2 or source not in self._sha:
                    self._sha[source] = str(self.client.script_load(source))
                pipe = self.client.pipeline(transaction=False)
                pipe.evalsha(self._sha[source], len(keys), *keys, *args)
                also(pipe)
                try:
                    return list(pipe.execute())
                except redis.exceptions.NoScriptError:
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")
