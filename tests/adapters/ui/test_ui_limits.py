"""The web page meets the limits the API meets, at the same entrance: its requests count against the signed-in
principal's request rate, and a long listing's charge is paid by the page's next requests as by the API's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tasks_backend.access.limits import FREE_SCAN, JOBS_PER_REQUEST
from tasks_backend.service.runtime import build_runtime
from tests.conftest import ALICE, Serve, make_settings


@contextmanager
def signed_in(base: str, token: str) -> Iterator[httpx.Client]:
    """A plain HTTP client holding a page session, as a browser would."""
    with httpx.Client(base_url=base, timeout=10) as page:
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.get("/ui/signin").text)
        assert csrf
        assert page.post("/ui/signin", data={"csrf": csrf[1], "token": token}).status_code == 303
        yield page


def assert_rate_limited(answer: httpx.Response) -> None:
    assert answer.status_code == 429, (answer.status_code, answer.text[:200])
    assert int(answer.headers["Retry-After"]) >= 1
    assert answer.headers["RateLimit-Policy"] == '"rate";q=5;w=60'


def test_the_page_counts_against_the_principals_request_rate(redis_base: str, serve: Serve) -> None:
    """5 a minute: the sign-in and four pages pass, then the page is refused as the API is, and the API as well."""
    base = serve(make_settings(redis_base, rate_limit=5, rate_window_s=60))
    with signed_in(base, "alice-token") as page:  # the sign-in is the first request
        answers = [page.get("/ui/jobs?status=completed") for _ in range(30)]
        assert [a.status_code for a in answers[:4]] == [200] * 4
        for refused in answers[4:]:
            assert_rate_limited(refused)
        assert_rate_limited(page.get("/ui/waiting"))
        assert_rate_limited(page.get("/ui/jobs/8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11/events"))
    assert_rate_limited(httpx.get(f"{base}/v1/jobs", headers=ALICE))
    # Another principal is untouched, and nobody signed in still reaches the sign-in form.
    assert httpx.get(f"{base}/v1/jobs", headers={"Authorization": "Bearer bob-token"}).status_code == 200
    assert httpx.get(f"{base}/ui/signin").status_code == 200


def test_a_long_listing_on_the_page_is_paid_for_by_the_pages_next_requests(redis_base: str, serve: Serve) -> None:
    """A filtered page listing reads all of the owner's jobs: the charge for that scan refuses what follows."""
    settings = make_settings(redis_base, rate_limit=10, rate_window_s=60, max_active_jobs=0)
    jobs = FREE_SCAN + 20 * JOBS_PER_REQUEST  # charged 20 requests' worth: twice the limit
    service = build_runtime(settings.with_(rate_limit=0)).service  # the same store, unlimited, makes the jobs
    for _ in range(jobs):
        service.submit("alice", "demo.sleep", {"seconds": 1})  # no worker: they stay queued
    base = serve(settings)
    with signed_in(base, "alice-token") as page:
        listed = page.get("/ui/jobs?status=completed")  # none completed: every job is read
        assert listed.status_code == 200
        refused = page.get("/ui/jobs")
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1, refused.status_code
