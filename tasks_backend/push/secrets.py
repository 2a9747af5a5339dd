"""Webhook signing secrets, one per principal, and Standard Webhooks signatures made with them.

A secret is `whsec_` and the base64 of 32 random bytes, as the Standard Webhooks specification has it. It is
kept in Redis as is (`keys.webhook_secret`): it must sign, so it cannot be stored as a digest; it is never
logged. A rotation keeps the replaced secret for a grace period, during which each delivery carries both
signatures (the specification's space-separated list), so receivers can switch over without losing one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from ..store.connect import redis_errors
from ..store.jobs import RedisStore

PREFIX = "whsec_"
SECRET_BYTES = 32
#: How long the replaced secret still signs after a rotation, unless the rotation says otherwise.
DEFAULT_GRACE_S = 24 * 3600
MAX_GRACE_S = 7 * 24 * 3600
#: The least a secret's key lives on after each use; a submit with a webhook renews it, so a job's
#: deliveries (which end within the TTL ceiling) always find the secret that job's owner was shown.
MIN_TTL_S = 400 * 24 * 3600


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, keyed with the secret's decoded bytes."""
    key = base64.b64decode(secret.removeprefix(PREFIX))
    signed = message_id.encode() + b"." + str(timestamp).encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


@dataclass(frozen=True)
class SecretState:
    """An owner's current secret, and the one a rotation replaced while it still signs (None otherwise)."""

    current: str
    previous: str | None = None
    previous_until_ms: int | None = None

    def signing(self) -> list[str]:
        """The secrets each delivery is signed with, newest first."""
        return [self.current] + ([self.previous] if self.previous else [])


class WebhookSecrets:
    """Reads, creates and rotates each owner's secret (`push/secret.lua`; Redis's clock ends a grace period)."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.ttl_ms = max(MIN_TTL_S * 1000, store.max_ttl_ms)

    def current(self, owner: str) -> SecretState:
        """The owner's secret, made now when there is none; its key's life is renewed."""
        return self._call(owner, "ensure", 0)

    def rotate(self, owner: str, grace_s: int = DEFAULT_GRACE_S) -> SecretState:
        """A new current secret; the replaced one signs too for `grace_s` more seconds."""
        return self._call(owner, "rotate", grace_s)

    def signing(self, owner: str) -> list[str]:
        """The secrets to sign the owner's deliveries with now, newest first."""
        return self.current(owner).signing()

    def _call(self, owner: str, mode: str, grace_s: int) -> SecretState:
        with redis_errors():
            current, previous, until = self.store.scripts.call(
                "push.secret", [self.store.keys.webhook_secret(owner)], new_secret(), int(grace_s * 1000),
                self.ttl_ms, mode)
        return SecretState(str(current), str(previous) or None, int(until) if until else None)
