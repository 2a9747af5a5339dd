"""Limits per principal over real HTTP: request rate, failed authentication per address, active jobs, open
streams, params size and the requested-TTL ceiling; each kept in Redis, so that it holds across web processes."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tasks_backend.access.auth import Principal
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.errors import QuotaExceeded, RateLimited
from tasks_backend.service.runtime import build_runtime
from tests.adapters.mcp.clients.rpc import LEGACY, Legacy
from tests.conftest import ALICE, BOB, Serve, bearer, make_settings


def submit(base: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    body.setdefault("operation", "demo.sleep")
    body.setdefault("params", {"seconds": 5})
    return httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=10)


def assert_problem_429(response: httpx.Response, slug: str) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["type"].endswith(f"/{slug}")
    assert int(response.headers["Retry-After"]) >= 1
    assert response.json()["retryAfterSeconds"] == int(response.headers["Retry-After"])


def test_request_rate_is_limited_per_principal_across_web_processes(redis_base: str, serve: Serve) -> None:
    settings = make_settings(redis_base, rate_limit=6, rate_window_s=60)
    one, two = serve(settings), serve(settings)  # two web processes, one Redis
    job_id = submit(one, ALICE).json()["taskId"]
    answers = [httpx.get(f"{base}/v1/jobs/{job_id}", headers=ALICE) for base in (one, two, one, two, one)]
    assert [a.status_code for a in answers] == [200] * 5  # the submit was the first of six
    over = httpx.get(f"{two}/v1/jobs", headers=ALICE)  # a Flask route this time, not the fast path
    assert_problem_429(over, "rate-limited")
    assert over.headers["RateLimit-Policy"] == '"rate";q=6;w=60'
    remaining, reset = over.headers["RateLimit"].removeprefix('"rate";').split(";")
    assert remaining == "r=0" and 1 <= int(reset.removeprefix("t=")) <= 60
    assert_problem_429(httpx.get(f"{one}/v1/jobs/{job_id}", headers=ALICE), "rate-limited")  # the fast path too
    assert_problem_429(submit(one, ALICE), "rate-limited")
    assert httpx.get(f"{one}/v1/jobs", headers=BOB).status_code == 200  # another principal is not affected


def test_failed_authentication_is_throttled_per_client_address(redis_base: str, serve: Serve) -> None:
    base = serve(make_settings(redis_base, auth_failure_limit=20, auth_failure_window_s=60))
    guesses = [httpx.get(f"{base}/v1/jobs", headers=bearer(f"guess-{i}")).status_code for i in range(25)]
    assert guesses[:20] == [401] * 20 and set(guesses[20:]) == {429}
    # Past the limit a right token is refused too: otherwise the answer would tell a right guess from a wrong one.
    assert_problem_429(httpx.get(f"{base}/v1/jobs", headers=ALICE), "rate-limited")
    assert httpx.get(f"{base}/v1/jobs/00000000-0000-4000-8000-000000000000", headers=ALICE).status_code == 429
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as elsewhere:
        assert elsewhere.get(f"{base}/v1/jobs", headers=ALICE).status_code == 200


def test_an_admission_is_read_only_by_its_own_limiter(redis_base: str) -> None:
    """A request's admission stays in its thread after the request: another runtime's submit in that thread
    (the in-process API, say) must count its own jobs, not take the admission's count for them."""
    first, second = (build_runtime(make_settings(redis_base, max_active_jobs=1)) for _ in range(2))
    second.service.submit("alice", "demo.sleep", {"seconds": 1})  # no worker: it stays queued
    first.limits().admit(Principal("alice"), "192.0.2.1")  # alice has no jobs in the first runtime
    with pytest.raises(QuotaExceeded):
        second.service.submit("alice", "demo.sleep", {"seconds": 1})


def test_behind_a_trusted_proxy_failures_count_per_forwarded_client(redis_base: str, serve: Serve) -> None:
    """All requests come from one peer (the proxy); the address that counts is the one the proxy appended."""
    base = serve(make_settings(redis_base, auth_failure_limit=5, auth_failure_window_s=60, trusted_proxies=1))

    def via_proxy(client: str, token: str = "guess", forged: str = "") -> int:
        forwarded = f"{forged}, {client}" if forged else client
        headers = {**bearer(token), "X-Forwarded-For": forwarded}
        return httpx.get(f"{base}/v1/jobs", headers=headers).status_code

    assert [via_proxy("203.0.113.5") for _ in range(7)] == [401] * 5 + [429] * 2
    assert via_proxy("203.0.113.5", "alice-token") == 429
    # A left entry is the client's own writing: it does not get the guesser a fresh count.
    assert via_proxy("203.0.113.5", forged="198.51.100.1") == 429
    # Another client behind the same proxy is not locked out with it.
    assert via_proxy("203.0.113.9", "alice-token") == 200


def test_failed_page_sign_ins_behind_a_trusted_proxy_count_for_the_forwarded_client(redis_base: str,
                                                                                    serve: Serve) -> None:
    """The web page's sign-in counts a guessed token against the same address as a bearer request does."""
    base = serve(make_settings(redis_base, auth_failure_limit=3, auth_failure_window_s=60, trusted_proxies=1))
    guesser = {"X-Forwarded-For": "203.0.113.7"}
    with httpx.Client(base_url=base, headers=guesser) as page:
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.get("/ui/signin").text)
        assert csrf
        codes = [page.post("/ui/signin", data={"csrf": csrf[1], "token": f"guess-{i}"}).status_code for i in range(4)]
    assert codes == [401, 401, 401, 429]
    assert httpx.get(f"{base}/v1/jobs", headers={**ALICE, **guesser}).status_code == 429
    assert httpx.get(f"{base}/v1/jobs", headers={**ALICE, "X-Forwarded-For": "203.0.113.8"}).status_code == 200


def test_without_trusted_proxies_a_forwarded_address_is_not_believed(redis_base: str, serve: Serve) -> None:
    base = serve(make_settings(redis_base, auth_failure_limit=5, auth_failure_window_s=60))
    codes = [httpx.get(f"{base}/v1/jobs", headers={**bearer("guess"), "X-Forwarded-For": f"203.0.113.{i}"}
                       ).status_code for i in range(7)]
    assert codes == [401] * 5 + [429] * 2  # one peer, one count, whatever the header says


def test_active_jobs_are_limited_per_principal_and_freed_when_jobs_end(redis_base: str, serve: Serve) -> None:
    settings = make_settings(redis_base, max_active_jobs=3)
    base = serve(settings)  # no worker: the jobs stay queued
    ids = [submit(base, ALICE).json()["taskId"] for _ in range(3)]
    assert_problem_429(submit(base, ALICE), "quota-exceeded")
    assert submit(base, BOB).status_code == 202
    assert httpx.post(f"{base}/v1/jobs/{ids[0]}/cancel", headers=ALICE).status_code == 202
    assert submit(base, ALICE).status_code == 202  # the cancelled job no longer counts
    assert_problem_429(submit(base, ALICE), "quota-exceeded")
    runtime = build_runtime(settings)
    with pytest.raises(QuotaExceeded):  # the in-process API counts the same jobs
        runtime.service.submit("alice", "demo.sleep", {"seconds": 1})
    for key in (runtime.store.keys.active_jobs("alice"), runtime.store.keys.active_mark("alice")):
        assert runtime.store.redis.pttl(key) > 0, key


def test_a_replay_at_the_active_limit_gets_its_job_back(redis_base: str, serve: Serve) -> None:
    """A client whose reply was lost sends its keyed submit again while the owner is at its limit: it gets the job
    the first made (not a 429 that leaves it unable to tell whether its work was accepted); a new key is still
    refused, and the same key with another body is the conflict it is without a limit."""
    settings = make_settings(redis_base, max_active_jobs=1)
    base = serve(settings)  # no worker: the job stays queued
    keyed = {**ALICE, "Idempotency-Key": "order-7"}
    first = submit(base, keyed)
    assert first.status_code == 202
    again = submit(base, keyed)
    assert again.status_code == 202, again.text
    assert again.json()["taskId"] == first.json()["taskId"] and again.headers["Idempotent-Replayed"] == "true"
    assert_problem_429(submit(base, {**ALICE, "Idempotency-Key": "order-8"}), "quota-exceeded")
    other = submit(base, keyed, params={"seconds": 4})
    assert other.json()["type"].endswith("/idempotency-conflict"), other.text
    runtime = build_runtime(settings)  # the in-process API, as a schedule's tick replays its job
    record, outcome = runtime.service.submit("alice", "demo.sleep", {"seconds": 5}, idempotency_key="order-7")
    assert record.id == first.json()["taskId"] and outcome.value == "existing"


def test_open_streams_are_limited_per_principal(redis_base: str, serve: Serve) -> None:
    settings = make_settings(redis_base, max_streams=2, sse_max_s=30)
    base = serve(settings)
    job_id = submit(base, ALICE).json()["taskId"]
    with contextlib.ExitStack() as streams:
        client = streams.enter_context(httpx.Client(base_url=base, headers=ALICE, timeout=10))
        for _ in range(2):
            held = streams.enter_context(client.stream("GET", f"/v1/jobs/{job_id}/events"))
            assert held.status_code == 200
        assert_problem_429(client.get(f"/v1/jobs/{job_id}/events"), "quota-exceeded")
        assert httpx.get(f"{base}/v1/jobs/{job_id}/events", headers=BOB).status_code == 404  # not bob's limit
        runtime = build_runtime(settings)
        assert runtime.store.redis.pttl(runtime.store.keys.streams("alice")) > 0


def test_params_over_the_size_limit_are_refused_and_not_stored(redis_base: str, serve: Serve) -> None:
    base = serve(make_settings(redis_base, max_params_bytes=10_000))
    refused = submit(base, ALICE, operation="test.steps", params={"ledger": "x" * 20_000})
    assert refused.status_code == 413 and refused.headers["Content-Type"] == "application/problem+json"
    assert "10000" in refused.json()["detail"]
    assert httpx.get(f"{base}/v1/jobs", headers=ALICE).json()["jobs"] == []
    assert submit(base, ALICE, operation="test.steps", params={"ledger": "x" * 9_000}).status_code == 202


def test_a_requested_ttl_is_capped(redis_base: str, serve: Serve) -> None:
    base = serve(make_settings(redis_base, max_requested_ttl_s=3600))
    with httpx.Client(base_url=base, timeout=10) as http:
        caller = Legacy(http, "alice-token")
        caller.initialize(LEGACY)
        month = 30 * 86400 * 1000
        created = caller.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 1},
                                               "task": {"ttl": month}})["task"]
        assert created["ttl"] == 3600 * 1000
        assert http.get(f"/v1/jobs/{created['taskId']}", headers=ALICE).json()["ttlMs"] == 3600 * 1000


def test_limit_keys_expire(redis_base: str, serve: Serve) -> None:
    settings = make_settings(redis_base)
    base = serve(settings)
    submit(base, ALICE)
    httpx.get(f"{base}/v1/jobs", headers=bearer("wrong"))
    runtime = build_runtime(settings)
    keys = runtime.store.keys
    for key in (keys.rate("alice"), keys.auth_failures("127.0.0.1")):
        assert runtime.store.redis.pttl(key) > 0, key


def test_defaults_stop_guessing_huge_params_and_month_long_ttls(redis_base: str, serve: Serve) -> None:
    base = serve(make_settings(redis_base))  # the shipped defaults
    guesses = [httpx.get(f"{base}/v1/jobs", headers=bearer(f"guess-{i}")).status_code for i in range(150)]
    assert 429 in guesses and guesses.count(401) <= 100
    with httpx.Client(base_url=base, timeout=10, transport=httpx.HTTPTransport(local_address="127.0.0.3")) as http:
        huge = http.post("/v1/jobs", headers=ALICE,
                         json={"operation": "test.steps", "params": {"ledger": "x" * 900_000}})
        assert huge.status_code == 413
        caller = Legacy(http, "alice-token")
        caller.initialize(LEGACY)
        created = caller.result("tools/call", {"name": "demo.sleep", "arguments": {"seconds": 1},
                                               "task": {"ttl": 30 * 86400 * 1000}})["task"]
        assert created["ttl"] <= 86400 * 1000


def test_limit_scripts_give_the_same_outcome_when_applied_twice(redis_base: str) -> None:
    """A call whose reply was lost is retried with the same nonce: it must not count twice."""
    runtime = build_runtime(make_settings(redis_base))
    limiter, keys = runtime.limits(), runtime.store.keys
    rate_keys = [keys.rate("carol"), keys.active_jobs("carol"), keys.active_mark("carol"), keys.owner_index("carol")]
    first = limiter.scripts.call("limits.rate", rate_keys, 3, 60_000_000, "nonce-1", 1)
    again = limiter.scripts.call("limits.rate", rate_keys, 3, 60_000_000, "nonce-1", 1)
    assert first[:2] == again[:2] and first[0].split()[:2] == ["1", "2"]
    assert limiter.scripts.call("limits.rate", rate_keys, 3, 60_000_000, "nonce-2", 1)[0].split()[:2] == ["1", "1"]

    fail_key = [keys.auth_failures("198.51.100.7")]
    assert limiter.scripts.call("limits.auth_fail", fail_key, 60_000, "f-1")[0] == 1
    assert limiter.scripts.call("limits.auth_fail", fail_key, 60_000, "f-1")[0] == 1
    assert limiter.scripts.call("limits.auth_fail", fail_key, 60_000, "f-2")[0] == 2

    stream_key = [keys.streams("carol")]
    assert limiter.scripts.call("limits.stream", stream_key, 1, 60_000, "s-1") == [1, 0]
    assert limiter.scripts.call("limits.stream", stream_key, 1, 60_000, "s-1") == [1, 0]  # the same slot, renewed
    assert limiter.scripts.call("limits.stream", stream_key, 1, 60_000, "s-2")[0] == 0  # a second one is over the limit

    # A charge of 2 of a limit of 3 (1 used above, and 1 more): applied twice, the principal still has room for none
    # but not for less than none.
    charge_key = [keys.rate("dave")]
    assert limiter.scripts.call("limits.charge", charge_key, 3, 60_000_000, "c-1", 2) == 1
    assert limiter.scripts.call("limits.charge", charge_key, 3, 60_000_000, "c-1", 2) == 0
    dave = [keys.rate("dave"), keys.active_jobs("dave"), keys.active_mark("dave"), keys.owner_index("dave")]
    assert limiter.scripts.call("limits.rate", dave, 3, 60_000_000, "r-1", 1)[0].split()[:2] == ["1", "0"]


def test_a_listing_that_reads_many_jobs_is_charged_for_them(redis_base: str, serve: Serve) -> None:
    """A2A ListTasks orders by last change, so it reads every job of the caller's, and a filtered listing reads
    until it fills its page. Such a call is served in full, then charged one request per 20 jobs read beyond its
    first page: a caller with many jobs cannot make the server read them all again and again at the price of one
    request each."""
    settings = make_settings(redis_base, rate_limit=30, rate_window_s=60, max_active_jobs=0)
    base = serve(settings)
    runtime = build_runtime(settings)
    service = runtime.service  # on its own queue: the jobs stay queued
    for _ in range(150):
        service.submit("bob", "test.noop")
    for _ in range(1000):
        service.submit("alice", "test.noop")
    listing = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 10}}
    a2a_headers = {"A2A-Version": "1.0"}
    # One page's worth of jobs costs the request only.
    for _ in range(3):
        answer = httpx.post(f"{base}/a2a", json=listing, headers={**BOB, **a2a_headers}, timeout=30).json()
        assert answer["result"]["totalSize"] == 150
    assert httpx.get(f"{base}/v1/jobs", headers=BOB).status_code == 200
    # 1,000 jobs: the answer is whole, and then the next requests wait off (1000 - 200) / 20 = 40 requests' worth.
    answer = httpx.post(f"{base}/a2a", json=listing, headers={**ALICE, **a2a_headers}, timeout=30).json()
    assert answer["result"]["totalSize"] == 1000 and len(answer["result"]["tasks"]) == 10
    assert_problem_429(httpx.get(f"{base}/v1/jobs", headers=ALICE), "rate-limited")
    rate = service.store.redis.pttl(service.store.keys.rate("alice"))
    assert 0 < rate <= 60_000 + 80_000 + 2_000  # the debt's key expires once it is paid off, like every key
    # The same for a filtered listing that reads every job to find none.
    for _ in range(1000):
        service.submit("carol", "test.noop")
    assert service.list("carol", status="failed") == ([], None)
    with pytest.raises(RateLimited):
        runtime.limits().admit(Principal("carol"), None)


@pytest.fixture
def own_redis() -> Iterator[str]:
    """A Redis no other test uses: its count of scripts run is this test's alone."""
    server = EmbeddedRedis(appendonly=False).start()
    try:
        yield f"redis://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_a_busy_principal_is_admitted_in_batches(own_redis: str) -> None:
    """With a large limit most requests cost no round trip; the limit still holds."""
    runtime = build_runtime(make_settings(own_redis, rate_limit=1000, rate_window_s=60))
    limiter, redis = runtime.limits(), runtime.store.redis

    def scripts_run() -> int:
        return int(redis.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    before = scripts_run()
    for _ in range(100):
        limiter.admit(Principal("dave"), "203.0.113.9")
    assert scripts_run() - before <= 100 // 20 + 1
    admitted = 100
    with pytest.raises(RateLimited):
        while admitted < 1001:
            limiter.admit(Principal("dave"), "203.0.113.9")
            admitted += 1
    assert admitted == 1000
