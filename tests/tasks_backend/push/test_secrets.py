"""Webhook signing secrets in a real Redis: made once, rotated with a grace period by Redis's clock, replayed
harmlessly, kept with a TTL; and signatures exactly as the Standard Webhooks library makes them."""

from __future__ import annotations

import base64
import datetime as dt
import secrets

from standardwebhooks import Webhook

from tasks_backend.push.secrets import MIN_TTL_S, PREFIX, WebhookSecrets, new_secret, signature
from tasks_backend.service.runtime import Runtime
from tests.conftest import wait_until


def _owner() -> str:
    return f"owner-{secrets.token_hex(4)}"


def test_a_signature_is_the_standard_webhooks_one() -> None:
    secret = new_secret()
    assert secret.startswith(PREFIX) and len(base64.b64decode(secret.removeprefix(PREFIX))) == 32
    body = '{"type":"job.completed","data":{"taskId":"é"}}'.encode()
    ours = signature(secret, "msg_1", 1_700_000_000, body)
    theirs = Webhook(secret).sign("msg_1", dt.datetime.fromtimestamp(1_700_000_000, dt.UTC), body.decode())
    assert ours == theirs


def test_a_secret_is_made_once_and_kept_with_a_ttl(runtime: Runtime) -> None:
    store, owner = runtime.store, _owner()
    keeper = WebhookSecrets(store)
    first = keeper.current(owner)
    assert first.previous is None and keeper.current(owner) == first and keeper.signing(owner) == [first.current]
    ttl = store.redis.pttl(store.keys.webhook_secret(owner))
    assert MIN_TTL_S * 1000 - 60_000 < ttl <= max(MIN_TTL_S * 1000, store.max_ttl_ms)
    assert WebhookSecrets(store).current(_owner()).current != first.current  # one per principal


def test_a_rotation_signs_with_both_until_its_grace_ends(runtime: Runtime) -> None:
    store, owner = runtime.store, _owner()
    keeper = WebhookSecrets(store)
    old = keeper.current(owner).current
    rotated = keeper.rotate(owner, 3600)
    assert rotated.previous == old and rotated.current != old
    assert keeper.signing(owner) == [rotated.current, old]
    assert rotated.previous_until_ms is not None
    # The script applied twice (a retry after a lost reply) rotates once.
    key = store.keys.webhook_secret(owner)
    fresh = new_secret()
    for _ in range(2):
        current, previous, _ = store.scripts.call("push.secret", [key], fresh, 1, keeper.ttl_ms, "rotate")
        assert (current, previous) in {(fresh, rotated.current), (fresh, "")}
    # A grace of 1 ms ends by Redis's clock: the replaced secret is dropped and signs nothing more.
    wait_until(lambda: keeper.signing(owner) == [fresh], 5, message="the grace period to end")
    assert keeper.rotate(owner, 0).previous is None
