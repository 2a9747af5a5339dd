"""Authentication: static tokens, the digest file, JWTs (HS256 and RS256). Pure logic, no I/O but files."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tasks_backend.access.auth import (
    JWT_LEEWAY_S,
    Authenticator,
    Identity,
    parse_static_tokens,
    parse_token_file,
    token_digest,
)
from tasks_backend.config import Settings
from tasks_backend.errors import Unauthenticated


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_static_tokens_and_admins() -> None:
    auth = Authenticator(Settings(tokens="alice:a1, bob:b2,broken", admins=("bob",)))
    assert auth.authenticate(bearer("a1")).name == "alice"
    assert auth.authenticate("bearer b2").admin is True
    for header in (None, "", "Bearer", "Bearer nope", "Basic a1", "Bearer " + "x" * 9000):
        with pytest.raises(Unauthenticated):
            auth.authenticate(header)
    assert parse_static_tokens("a:b,:c,d:,e") == [("a", token_digest("b"))]


def test_token_file_holds_digests_and_is_reread(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# comment\n\nci:{token_digest('t1')}\nbad-line\n")
    auth = Authenticator(Settings(tokens_file=str(path)))
    assert auth.authenticate(bearer("t1")).name == "ci"
    with pytest.raises(Unauthenticated):
        auth.authenticate(bearer(token_digest("t1")))  # the digest itself is not a token
    path.write_text(f"ci:{token_digest('t1')}\nops:{token_digest('t2-longer')}\n")
    assert auth.authenticate(bearer("t2-longer")).name == "ops"
    path.unlink()
    with pytest.raises(Unauthenticated):
        auth.authenticate(bearer("t1"))
    assert parse_token_file("x:" + "0" * 63) == []


def test_hs256_jwt_with_audience_and_issuer() -> None:
    settings = Settings(jwt_secret="s" * 32, jwt_audience="tasks", jwt_issuer="https://idp.example")
    auth = Authenticator(settings)
    claims = {"sub": "agent-7", "aud": "tasks", "iss": "https://idp.example", "exp": int(time.time()) + 60}
    assert auth.authenticate(bearer(jwt.encode(claims, "s" * 32, algorithm="HS256"))).name == "jwt:agent-7"
    for bad in ({**claims, "exp": int(time.time()) - JWT_LEEWAY_S - 10}, {**claims, "aud": "other"},
                {**claims, "iss": "x"}, {k: v for k, v in claims.items() if k != "exp"}, {**claims, "sub": ""}):
        with pytest.raises(Unauthenticated):
            auth.authenticate(bearer(jwt.encode(bad, "s" * 32, algorithm="HS256")))
    with pytest.raises(Unauthenticated):
        auth.authenticate(bearer(jwt.encode(claims, "t" * 32, algorithm="HS256")))
    none_alg = jwt.encode(claims, None, algorithm="none")  # type: ignore[arg-type]
    with pytest.raises(Unauthenticated):
        auth.authenticate(bearer(none_alg))


def test_rs256_jwt_verified_with_the_public_key() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    auth = Authenticator(Settings(jwt_public_key=public))
    token = jwt.encode({"sub": "svc", "exp": int(time.time()) + 60}, key, algorithm="RS256")
    assert auth.authenticate(bearer(token)).name == "jwt:svc"
    # a token signed with a shared secret is refused where only RS256 is configured
    forged = jwt.encode({"sub": "svc", "exp": int(time.time()) + 60}, "k" * 32, algorithm="HS256")
    with pytest.raises(Unauthenticated):
        auth.authenticate(bearer(forged))


def test_what_a_token_names_and_what_keeps_it_valid() -> None:
    """A web session ends with its credential: a token's digest, a JWT's expiry; JWT principals are `jwt:<sub>`."""
    auth = Authenticator(Settings(tokens="alice:a1", jwt_secret="s" * 32, admins=("alice", "jwt:auditor")))
    assert auth.identify("a1") == Identity("alice", digest=token_digest("a1"))
    exp = int(time.time()) + 60
    assert auth.identify(jwt.encode({"sub": "alice", "exp": exp}, "s" * 32, algorithm="HS256")) == Identity(
        "jwt:alice", expires=exp)
    assert auth.identify("nope") is None and auth.token_names() == {token_digest("a1"): "alice"}
    assert auth.principal("jwt:alice").admin is False and auth.principal("jwt:auditor").admin is True
