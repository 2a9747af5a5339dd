"""A worker's claim of a job: the reply read into a record, and the claim a worker's transport makes as it
fetches the job's message (one call for kombu's late-ack bookkeeping and the claim, when the broker is this Redis).

Rule: both claims are the same Lua (`lib/claim.lua`), so a job is claimed by the same rules whichever makes it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ..model.domain import JobRecord
from .fields import CLAIM_DROPS, record
from .keys import Keys
from .outcomes import Claimed
from .runner import ScriptRunner, new_request_id
from .scripts import SCRIPTS


@dataclass(frozen=True)
class ClaimTerms:
    """What a claim asks: a lease of `lease_ms` for `worker`, and the job failed past `max_attempts` claims."""

    lease_ms: int
    worker: str
    max_attempts: int

    @functools.cached_property
    def _exhausted(self) -> str:
        return json.dumps({"message": f"Gave up after {self.max_attempts} attempts: the worker running it was lost "
                                      "each time.", "type": "WorkerLost"})

    def args(self, request_id: str | None = None) -> list[Any]:
        """The claim script's ARGV."""
        return [request_id or new_request_id(), self.lease_ms, self.worker, self.max_attempts, self._exhausted]


def read_claim(job_id: str, reply: Sequence[Any]) -> tuple[Claimed, JobRecord | None]:
    """The claim script's reply (decoded), as its outcome and, on "ok", the job's record as the claim left it."""
    outcome = Claimed(reply[0])
    if outcome is not Claimed.OK:
        return outcome, None
    read, wrote = reply[2], reply[3]
    raw = dict(zip(read[::2], read[1::2], strict=True))
    queued = raw["updated"]  # the last move before this run: when its wait in the queue began
    if wrote:  # a replay answers with the hash as the claim left it
        for name in CLAIM_DROPS:
            raw.pop(name, None)
        raw.update(zip(wrote[::2], wrote[1::2], strict=True))
    return outcome, record(job_id, raw, queued_ms=int(queued))


def decoded(reply: Any) -> Any:
    """A reply read without `decode_responses` (kombu's connections), as text: what `read_claim` takes."""
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, list):
        return [decoded(x) for x in reply]
    return reply


class FetchClaim:
    """The claim made with a job message's fetch, on the broker's own connection (see `workers.broker`)."""

    NAME = "claim_fetched"

    def __init__(self, keys: Keys, terms: ClaimTerms) -> None:
        self.keys, self.terms = keys, terms
        self._runner: ScriptRunner | None = None

    def __call__(self, client: redis.Redis, job_id: str, unacked: tuple[str, str], tag: str, score: float,
                 kept: str, acked: Sequence[str] = ()) -> list[Any]:
        """Records the message as unacknowledged (`unacked`: kombu's index and hash; `kept`: the message as kombu
        restores it), forgets the messages `acked` (their tags), and claims the job; returns the claim's reply,
        decoded. Redis errors are raised as they are, for the transport to handle as any other broker error."""
        if self._runner is None or self._runner.redis is not client:  # a new client after a reconnection
            self._runner = ScriptRunner(client, {self.NAME: SCRIPTS[self.NAME]}, store_errors=False)
        keys = [*self.keys.job_keys(job_id), *unacked]
        return list(decoded(self._runner.call(self.NAME, keys, *self.terms.args(), tag, score, kept, *acked)))
