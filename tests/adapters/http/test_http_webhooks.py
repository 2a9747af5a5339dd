"""Webhooks for plain-HTTP callers end to end: submits over real HTTP, a `tasks-backend worker` process delivering
to a receiver on loopback, and every delivery checked with the `standardwebhooks` library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tasks_backend.cli.main import main
from tasks_backend.client import Client
from tasks_backend.devtools.receivers import Receiver
from tasks_backend.errors import InvalidParams
from tests.adapters.a2a.test_a2a_push import push_settings, push_url, push_worker  # noqa: F401  (fixtures)
from tests.conftest import bearer, wait_until

DEFAULT_TYPES = {"job.completed", "job.failed", "job.cancelled", "job.input_required"}


@pytest.fixture
def receiver() -> Any:
    r = Receiver()
    yield r
    r.close()


def submit(url: str, token: str, operation: str, params: dict[str, Any], webhook: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/v1/jobs", json={"operation": operation, "params": params, "webhook": webhook},
                      headers=bearer(token), timeout=10)


def secret_of(url: str, token: str) -> str:
    answer = httpx.get(f"{url}/v1/webhook-secret", headers=bearer(token), timeout=10)
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store", answer.text
    return str(answer.json()["secret"])


def verified(receiver: Receiver, secret: str) -> list[dict[str, Any]]:
    """Every delivery, each checked with the Standard Webhooks library (raises if one does not verify)."""
    hook = Webhook(secret)
    with receiver.lock:
        raw = list(receiver.raw)
    return [hook.verify(body, headers) for headers, body in raw]


def types(receiver: Receiver, secret: str) -> list[str]:
    return [event["type"] for event in verified(receiver, secret)]


def wait_for(receiver: Receiver, secret: str, kind: str, timeout: float = 30) -> list[dict[str, Any]]:
    wait_until(lambda: kind in types(receiver, secret), timeout, message=f"a {kind} delivery")
    return verified(receiver, secret)


def test_a_finished_job_is_delivered_signed_with_the_owners_secret(push_url: str, push_worker: Any,  # noqa: F811
                                                                   receiver: Receiver, users: Any) -> None:
    _, token = users.new()
    secret = secret_of(push_url, token)
    assert secret.startswith("whsec_") and secret_of(push_url, token) == secret  # made once, then kept
    response = submit(push_url, token, "test.noop", {}, {"url": receiver.url})
    assert response.status_code == 202, response.text
    job_id = response.json()["taskId"]
    events = wait_for(receiver, secret, "job.completed")
    assert [e["type"] for e in events] == ["job.completed"]  # the default events leave progress out
    data = events[0]["data"]
    assert (data["taskId"], data["status"], data["result"], data["operation"]) == (
        job_id, "completed", {"ok": True}, "test.noop")
    assert events[0]["timestamp"] == data["lastUpdatedAt"]
    headers = receiver.raw[0][0]
    assert headers["webhook-id"].startswith("msg_") and headers["webhook-signature"].startswith("v1,")
    assert headers["Content-Type"] == "application/json"
    with pytest.raises(WebhookVerificationError):  # another owner's secret does not sign it
        verified(receiver, secret_of(push_url, users.new()[1]))


def test_progress_when_asked_in_order_then_the_end(push_url: str, push_worker: Any, receiver: Receiver,  # noqa: F811
                                                   users: Any, tmp_path: Path) -> None:
    _, token = users.new()
    secret = secret_of(push_url, token)
    response = submit(push_url, token, "test.steps", {"ledger": str(tmp_path / "ledger"), "steps": 3},
                      {"url": receiver.url, "events": ["progress", "completed"]})
    assert response.status_code == 202, response.text
    events = wait_for(receiver, secret, "job.completed")
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "job.completed" and set(kinds[:-1]) == {"job.progress"} and len(kinds) >= 2
    done = [e["data"]["progress"]["done"] for e in events[:-1] if "progress" in e["data"]]
    assert done == sorted(done) and done  # in order, as the job reported it
    stamps = [e["data"]["lastUpdatedAt"] for e in events]
    assert stamps == sorted(stamps)
    ids = [headers["webhook-id"] for headers, _ in receiver.raw]
    assert len(set(ids)) == len(ids)  # one id per change


def test_failed_cancelled_and_input_required(push_url: str, push_worker: Any, users: Any,  # noqa: F811
                                             tmp_path: Path) -> None:
    _, token = users.new()
    secret = secret_of(push_url, token)
    failing, spinning, asking = Receiver(), Receiver(), Receiver()
    try:
        assert submit(push_url, token, "demo.fail", {"message": "boom"}, {"url": failing.url}).status_code == 202
        spin = submit(push_url, token, "test.spin", {"ledger": str(tmp_path / "spin")}, {"url": spinning.url})
        ask = submit(push_url, token, "test.ask_twice", {"ledger": str(tmp_path / "ask")}, {"url": asking.url})
        assert spin.status_code == 202 and ask.status_code == 202
        wait_until(lambda: (tmp_path / "spin").exists(), 30, message="the spinning job to start")
        cancel = httpx.post(f"{push_url}/v1/jobs/{spin.json()['taskId']}/cancel", headers=bearer(token))
        assert cancel.status_code == 202, cancel.text
        failed = wait_for(failing, secret, "job.failed")
        assert failed[-1]["data"]["error"]["message"] and failed[-1]["data"]["status"] == "failed"
        assert wait_for(spinning, secret, "job.cancelled")[-1]["data"]["status"] == "cancelled"
        asked = wait_for(asking, secret, "job.input_required")
        assert "first" in asked[0]["data"]["inputRequests"]
        for receiver in (failing, spinning, asking):
            assert set(types(receiver, secret)) <= DEFAULT_TYPES
        httpx.post(f"{push_url}/v1/jobs/{ask.json()['taskId']}/cancel", headers=bearer(token))
    finally:
        for r in (failing, spinning, asking):
            r.close()


def test_a_receiver_that_fails_first_still_gets_every_event_in_order(push_url: str, push_worker: Any,  # noqa: F811
                                                                     users: Any, tmp_path: Path) -> None:
    _, token = users.new()
    secret = secret_of(push_url, token)
    receiver = Receiver(fail_first=2)
    try:
        response = submit(push_url, token, "test.steps", {"ledger": str(tmp_path / "ledger"), "steps": 2},
                          {"url": receiver.url, "events": ["progress", "completed"]})
        assert response.status_code == 202, response.text
        events = wait_for(receiver, secret, "job.completed")
        assert receiver.attempts >= len(events) + 2  # the refused attempts were retried
        # ... as the same messages: a receiver that drops an id it already had loses nothing.
        delivered = [headers["webhook-id"] for headers, _ in receiver.raw]
        assert {headers["webhook-id"] for headers in receiver.refused} <= set(delivered)
        assert delivered[0] == receiver.refused[0]["webhook-id"]
        kinds = [e["type"] for e in events]
        assert kinds[-1] == "job.completed" and set(kinds[:-1]) <= {"job.progress"}
        stamps = [e["data"]["lastUpdatedAt"] for e in events]
        assert stamps == sorted(stamps)
    finally:
        receiver.close()


def test_after_a_rotation_deliveries_verify_with_the_new_secret(push_url: str, push_worker: Any,  # noqa: F811
                                                                receiver: Receiver, users: Any) -> None:
    _, token = users.new()
    runner = CliRunner()
    env = {"TASKS_BACKEND_URL": push_url, "TASKS_BACKEND_TOKEN": token}
    first = runner.invoke(main, ["webhook-secret"], env=env, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    old = first.stdout.strip()
    assert old == secret_of(push_url, token)
    # With a grace period, each delivery carries both signatures: receivers can switch over without a loss.
    rotated = runner.invoke(main, ["webhook-secret", "--rotate"], env=env, catch_exceptions=False)
    assert rotated.exit_code == 0, rotated.output
    new = rotated.stdout.strip()
    assert new.startswith("whsec_") and new != old and "also signs until" in rotated.stderr
    assert submit(push_url, token, "test.noop", {}, {"url": receiver.url}).status_code == 202
    wait_for(receiver, new, "job.completed")
    assert verified(receiver, old) and len(receiver.raw[-1][0]["webhook-signature"].split(" ")) == 2
    # Without one, the old secret signs nothing more.
    newest = runner.invoke(main, ["webhook-secret", "--rotate", "--grace", "0"], env=env, catch_exceptions=False)
    assert newest.exit_code == 0 and newest.stdout.strip() == secret_of(push_url, token)
    later = Receiver()
    try:
        assert submit(push_url, token, "test.noop", {}, {"url": later.url}).status_code == 202
        wait_for(later, newest.stdout.strip(), "job.completed")
        for stale in (old, new):
            with pytest.raises(WebhookVerificationError):
                verified(later, stale)
    finally:
        later.close()
    worker_log = push_worker.log_path.read_text(errors="replace")
    assert not [s for s in (old, new, newest.stdout.strip()) if s.removeprefix("whsec_") in worker_log]


def test_the_python_client_submits_with_a_webhook(push_url: str, push_worker: Any, receiver: Receiver,  # noqa: F811
                                                  users: Any) -> None:
    _, token = users.new()
    with Client(push_url, token) as client:
        secret = client.webhook_secret()["secret"]
        job = client.submit("test.noop", webhook={"url": receiver.url})
        with pytest.raises(InvalidParams) as refused:
            client.submit("test.noop", webhook={"url": receiver.url, "events": ["done"]})
        assert refused.value.extra["errors"] == {"webhook.events": [refused.value.detail.split(": ", 1)[1]]}
    events = wait_for(receiver, secret, "job.completed")
    assert events[-1]["data"]["taskId"] == job.id


# -- refused input: a 422 naming the field, and no job ------------------------------------------------------
@pytest.mark.parametrize(("webhook", "field"), [
    ({"url": "http://127.0.0.1:9/hook"}, "webhook.url"),  # loopback: this app does not allow private targets
    ({"url": "http://10.1.2.3/hook"}, "webhook.url"),
    ({"url": "ftp://8.8.8.8/hook"}, "webhook.url"),
    ({"url": "https://user:pw@8.8.8.8/hook"}, "webhook.url"),
    ({"url": "https://8.8.8.8/a hook"}, "webhook.url"),
    ({}, "webhook.url"),
    ({"url": "https://8.8.8.8/hook", "events": ["completed", "finished"]}, "webhook.events"),
    ({"url": "https://8.8.8.8/hook", "events": []}, "webhook.events"),
    ({"url": "https://8.8.8.8/hook", "events": "completed"}, "webhook.events"),
    ({"url": "https://8.8.8.8/hook", "secret": "x"}, "webhook"),
    ("https://8.8.8.8/hook", "webhook"),
])
def test_a_refused_webhook_is_a_422_naming_the_field_and_no_job(live_url: str, users: Any, webhook: Any,
                                                                 field: str) -> None:
    _, token = users.new()
    answer = submit(live_url, token, "test.noop", {}, webhook)
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert list(problem["errors"]) == [field] and problem["detail"].startswith(f"`{field}`")
    listed = httpx.get(f"{live_url}/v1/jobs", headers=bearer(token), timeout=10).json()
    assert listed["jobs"] == []


def test_each_owner_sees_and_rotates_only_their_own_secret(live_url: str, users: Any) -> None:
    (_, alice), (_, bob) = users.new(), users.new()
    mine, theirs = secret_of(live_url, alice), secret_of(live_url, bob)
    assert mine != theirs
    rotated = httpx.post(f"{live_url}/v1/webhook-secret", json={"graceSeconds": 0}, headers=bearer(alice))
    assert rotated.status_code == 200 and "previousValidUntil" not in rotated.json()
    assert secret_of(live_url, alice) == rotated.json()["secret"] != mine
    assert secret_of(live_url, bob) == theirs
    assert httpx.get(f"{live_url}/v1/webhook-secret").status_code == 401
    bad = httpx.post(f"{live_url}/v1/webhook-secret", json={"graceSeconds": -1}, headers=bearer(alice))
    assert bad.status_code == 422 and list(bad.json()["errors"]) == ["graceSeconds"]
