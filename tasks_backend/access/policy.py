"""The limits as the job service sees them: a policy it is handed (`JobService(..., limits=...)`) and calls.

Rule: the service knows only this interface; `limits.Limiter` is the one kept in Redis, `NoLimits` holds nothing
back (a service that only reads, the tests).
"""

from __future__ import annotations

from typing import Any, Protocol


class Limits(Protocol):
    """What a submit and a listing ask of the limits."""

    def check_submit(self, owner: str, params: Any, ttl_s: float | None) -> float | None:
        """Check a submit against the limits before its job is created (and before its operation is looked up).

        Parameters:
          owner: the principal the job would belong to.
          params: the params as the caller sent them, before the operation's schema loads them.
          ttl_s: the TTL the caller asked for, in seconds; None for the operation's default.

        Returns:
          float | None: the TTL to ask for instead: `ttl_s` within the ceiling on a requested TTL (None stays None).

        Raises:
          PayloadTooLarge: the params take more bytes as JSON than are accepted.
          QuotaExceeded: the owner has as many unfinished jobs as are allowed.
          StoreUnavailable: the count of the owner's jobs could not be read.
        """
        ...

    def scanned(self, owner: str, jobs: int) -> None:
        """A listing of the owner's jobs, already served, read `jobs` of them (a long scan is paid for after it is
        served: refusing it half-way would waste what it read, and an owner with many jobs could never list them).

        Parameters:
          owner: the principal whose jobs were read.
          jobs: how many entries of the owner index the listing read.

        Returns:
          None. It raises nothing for Redis being unreachable: the listing has been answered.
        """
        ...


class NoLimits:
    """The policy that holds nothing back."""

    def check_submit(self, owner: str, params: Any, ttl_s: float | None) -> float | None:
        return ttl_s

    def scanned(self, owner: str, jobs: int) -> None:
        return None
