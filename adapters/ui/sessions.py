"""What a web page session keeps of the credential that opened it, so that the session ends with it.

The session cookie is signed, not secret (whoever holds it can read it). It names the principal and either, for
a static or file token, a mark of that token: a keyed digest of the token's digest, which neither is the token nor
lets a guess at it be checked without the server's secret; or, for a JWT, its `exp`. At each request the credential
is looked up again: a token gone from the tokens (or naming another principal now) ends the session, a JWT's
session ends when the API stops taking it (past its expiry and the API's clock leeway, or when JWTs are no longer
taken), and the principal's rights are read from the settings, never from the cookie. A session of an earlier
release, which holds neither, has ended.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any

from tasks_backend.access.auth import JWT_LEEWAY_S, JWT_PREFIX, Authenticator, Principal

#: The session fields: the principal's name, the token's mark, the JWT's expiry.
PRINCIPAL, TOKEN_MARK, JWT_EXPIRES = "p", "k", "j"


class SessionCredentials:
    def __init__(self, authenticator: Authenticator, secret: str) -> None:
        self.authenticator = authenticator
        self._key = hmac.new(secret.encode(), b"tasks-backend.ui.credential", hashlib.sha256).digest()
        # (the tokens' digest -> principal mapping, mark -> principal), rebuilt when the tokens change.
        self._marks: tuple[Mapping[str, str] | None, dict[str, str]] = (None, {})

    def opened_with(self, token: str) -> dict[str, Any] | None:
        """The fields of a session opened with `token` (already let in by the gate); None if it can open none,
        as a JWT the API would no longer take (past its expiry and the leeway) cannot."""
        identity = self.authenticator.identify(token)
        if identity is None:
            return None
        if identity.digest is not None:
            return {PRINCIPAL: identity.name, TOKEN_MARK: self._mark(identity.digest)}
        if identity.expires is None or not _taken(identity.expires):
            return None
        return {PRINCIPAL: identity.name, JWT_EXPIRES: identity.expires}

    def principal(self, session: Mapping[str, Any]) -> Principal | None:
        """The session's principal, with its rights as they stand; None once what opened the session is gone."""
        name, mark, expires = session.get(PRINCIPAL), session.get(TOKEN_MARK), session.get(JWT_EXPIRES)
        if not isinstance(name, str):
            return None
        if isinstance(mark, str):
            if self._principal_of(mark) != name:
                return None
        elif isinstance(expires, int | float) and not isinstance(expires, bool):
            if not (self.authenticator.takes_jwts and name.startswith(JWT_PREFIX) and _taken(expires)):
                return None
        else:
            return None
        return self.authenticator.principal(name)

    def _mark(self, digest: str) -> str:
        return hmac.new(self._key, digest.encode(), hashlib.sha256).hexdigest()[:32]

    def _principal_of(self, mark: str) -> str | None:
        names = self.authenticator.token_names()
        seen, marks = self._marks
        if names is not seen:
            marks = {self._mark(digest): name for digest, name in names.items()}
            self._marks = (names, marks)
        return marks.get(mark)


def _taken(expires: float) -> bool:
    """Whether the API still takes a JWT expiring at `expires`: as its check does, `JWT_LEEWAY_S` past it."""
    return time.time() < expires + JWT_LEEWAY_S
