"""The one call an entrance makes for each request: authentication, then the per-request limits.

Rule: a failed authentication is counted against the caller's address before it is refused; with Redis
unreachable the limits are skipped (fail open), never the authentication.
"""

from __future__ import annotations

import contextlib
import logging

from ..errors import StoreUnavailable, Unauthenticated
from .auth import Authenticator, Principal
from .limits import Limiter

log = logging.getLogger(__name__)


class Gate:
    """Authentication plus the per-request limits: the one call an entrance makes for each request."""

    def __init__(self, authenticator: Authenticator, limiter: Limiter) -> None:
        self.authenticator, self.limiter = authenticator, limiter

    def authenticate(self, authorization: str | None, address: str | None) -> Principal:
        """The caller, once within its limits. With Redis unreachable the limits are skipped (fail open): what
        needs Redis answers 503 by itself, and what does not (metrics, the operation list) keeps working."""
        try:
            principal = self.authenticator.authenticate(authorization)
        except Unauthenticated:
            with contextlib.suppress(StoreUnavailable):
                self.limiter.auth_failed(address)
            raise
        self.admit(principal, address)
        return principal

    def admit(self, principal: Principal, address: str | None) -> None:
        """Count one request of a caller already known (by a bearer token, or by the web page's session) against
        the per-request limits; raises `RateLimited` over one. Fails open as `authenticate` does."""
        try:
            self.limiter.admit(principal, address)
        except StoreUnavailable as exc:
            log.warning("limits skipped: Redis unreachable (%r)", exc.__cause__)
