"""Who is calling: bearer tokens (static, from a digest file, or JWTs) mapped to principals.

Secrets are compared in constant time against every configured digest (no early exit), and never
logged. A token file is re-read when it changes, so `tasks-backend token add` needs no restart.

Principals from JWTs have a namespace of their own: a JWT whose `sub` is `alice` is the principal
`jwt:alice`. Static and file tokens cannot name a principal holding a `:`, so a subject never acts as
one of theirs, and an admin right follows only from an entry written with the prefix.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from ..config import Settings
from ..errors import Unauthenticated

#: The name of a JWT's principal is its `sub` after this prefix.
JWT_PREFIX = "jwt:"
#: Seconds a JWT's `exp` and `nbf` are stretched by, for an issuer whose clock is a little off ours.
JWT_LEEWAY_S = 30
#: Longest `sub` taken (OpenID Connect's bound on a subject).
MAX_SUBJECT_CHARS = 255


@dataclass(frozen=True)
class Principal:
    name: str
    #: May read any job (`TASKS_BACKEND_ADMINS`).
    admin: bool = False
    #: May read, cancel and rerun any job and act in bulk, never answer another's (`TASKS_BACKEND_OPERATORS`).
    operator: bool = False


def principal_of(settings: Settings, name: str) -> Principal:
    """The principal `name` with the rights `settings` give it (also what a bulk job acts as, on a worker)."""
    return Principal(name=name, admin=name in settings.admins, operator=name in settings.operators)


@dataclass(frozen=True)
class Identity:
    """Whom a bearer token names, and what it stays valid by (a web session opened with it ends with it)."""

    name: str
    #: A static or file token's SHA-256 digest (valid while the tokens hold it); None for a JWT.
    digest: str | None = None
    #: A JWT's `exp` (Unix seconds); None for a static or file token.
    expires: float | None = None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_static_tokens(spec: str) -> list[tuple[str, str]]:
    """`principal:token,principal:token` -> [(principal, sha256 digest)]."""
    out: list[tuple[str, str]] = []
    for item in spec.split(","):
        principal, sep, token = item.strip().partition(":")
        if sep and principal and token:
            out.append((principal, token_digest(token)))
    return out


def parse_token_file(text: str) -> list[tuple[str, str]]:
    """Lines of `principal:sha256-hex`; blank lines and `#` comments are skipped."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        principal, sep, digest = line.partition(":")
        digest = digest.strip().lower()
        if sep and principal.strip() and len(digest) == 64:
            out.append((principal.strip(), digest))
    return out


class Authenticator:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._static = parse_static_tokens(settings.tokens or "")
        self._file_entries: list[tuple[str, str]] = []
        self._file_stamp: tuple[float, int] | None = None
        self._index: dict[str, tuple[str, str]] = {}
        self._names: dict[str, str] = {}
        self._indexed_from: list[tuple[str, str]] | None = None
        self._jwt_key = settings.jwt_public_key or settings.jwt_secret
        self._jwt_algorithms = ["RS256"] if settings.jwt_public_key else ["HS256"]

    @property
    def configured(self) -> bool:
        return bool(self._static or self.settings.tokens_file or self._jwt_key)

    def _file_tokens(self) -> list[tuple[str, str]]:
        path = self.settings.tokens_file
        if not path:
            return self._file_entries
        try:
            st = os.stat(path)
        except OSError:
            if self._file_stamp is not None:  # the file went away: so did its tokens
                self._file_entries, self._file_stamp = [], None
            return self._file_entries
        stamp = (st.st_mtime, st.st_size)
        if stamp != self._file_stamp:
            with open(path, encoding="utf-8") as fh:
                self._file_entries = parse_token_file(fh.read())
            self._file_stamp = stamp
        return self._file_entries

    @property
    def takes_jwts(self) -> bool:
        return bool(self._jwt_key)

    def authenticate(self, authorization: str | None) -> Principal:
        scheme, _, token = (authorization or "").partition(" ")
        identity = self.identify(token.strip()) if scheme.lower() == "bearer" else None
        if identity is None:
            raise Unauthenticated()
        return self.principal(identity.name)

    def principal(self, name: str) -> Principal:
        """The principal `name` with the rights the settings give it now."""
        return principal_of(self.settings, name)

    def identify(self, token: str) -> Identity | None:
        """Whom a bearer token (without its scheme) names; None if no one."""
        if not token or len(token) > 8192:
            return None
        digest = token_digest(token)
        name = self._match_digest(digest)
        if name is not None:
            return Identity(name, digest=digest)
        if self._jwt_key and token.count(".") == 2:
            return self._match_jwt(token)
        return None

    def _match_digest(self, digest: str) -> str | None:
        # Looked up by the token's SHA-256: a lookup's timing can only tell about a digest, and a
        # digest tells nothing an attacker can steer towards a real token. The final comparison is
        # constant-time all the same.
        found = self._by_digest().get(digest)
        if found is None or not hmac.compare_digest(digest, found[1]):
            return None
        return found[0]

    def _by_digest(self) -> dict[str, tuple[str, str]]:
        entries = self._file_tokens()
        if entries is not self._indexed_from:
            index = {d: (p, d) for p, d in self._static}
            index.update({d: (p, d) for p, d in entries})
            self._index, self._indexed_from = index, entries
            self._names = {d: p for d, (p, _) in index.items()}
        return self._index

    def token_names(self) -> Mapping[str, str]:
        """digest -> principal of the static and file tokens as they stand (the file re-read if it changed);
        a new mapping whenever they change, the same one otherwise."""
        self._by_digest()
        return self._names

    def _match_jwt(self, token: str) -> Identity | None:
        assert self._jwt_key is not None
        try:
            claims: dict[str, Any] = jwt.decode(
                token, self._jwt_key, algorithms=self._jwt_algorithms, audience=self.settings.jwt_audience,
                issuer=self.settings.jwt_issuer, leeway=JWT_LEEWAY_S, options={"require": ["sub", "exp"]})
        except jwt.PyJWTError:
            return None
        sub = claims["sub"]
        # A name every key, log line and page can carry: a lone surrogate cannot be encoded, a control character
        # would forge log lines.
        if not isinstance(sub, str) or not 0 < len(sub) <= MAX_SUBJECT_CHARS or not sub.isprintable():
            return None
        return Identity(JWT_PREFIX + sub, expires=float(claims["exp"]))
