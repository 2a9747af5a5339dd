"""The page's "Failed" view over real HTTP with a worker: rerun one, rerun the ticked ones; an operator sees and
reruns every owner's failed jobs, an owner only their own."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.conftest import Users, bearer, wait_until

pytestmark = pytest.mark.usefixtures("worker")


def signed_in(live_url: str, token: str) -> tuple[httpx.Client, str]:
    page = httpx.Client(base_url=live_url, timeout=10)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.get("/ui/signin").text)
    assert csrf
    assert page.post("/ui/signin", data={"csrf": csrf[1], "token": token}).status_code == 303
    fresh = re.search(r'name="csrf" value="([^"]+)"', page.get("/ui/failed").text)
    assert fresh
    return page, fresh[1]


def failed(live_url: str, token: str, tmp_path: Path, key: int) -> str:
    made = httpx.post(f"{live_url}/v1/jobs", headers=bearer(token), timeout=10, json={
        "operation": "test.fails_until", "params": {"ledger": str(tmp_path / "l"), "switch": str(tmp_path / "s"),
                                                    "key": key}})
    job_id = str(made.json()["taskId"])
    wait_until(lambda: httpx.get(f"{live_url}/v1/jobs/{job_id}", headers=bearer(token)).json()["status"] == "failed",
               20)
    return job_id


def reruns_of(live_url: str, token: str, job_id: str) -> list[str]:
    jobs = httpx.get(f"{live_url}/v1/jobs", params={"limit": 200}, headers=bearer(token), timeout=10).json()["jobs"]
    return [j["taskId"] for j in jobs if j.get("rerunOf") == job_id]


def test_an_owner_reruns_one_or_the_ticked_ones_and_sees_only_their_own(live_url: str, users: Users,
                                                                      tmp_path: Path) -> None:
    _, mine = users.new("ui-failed")
    _, theirs = users.new("ui-failed")
    a, b, c = (failed(live_url, mine, tmp_path, i) for i in range(3))
    other = failed(live_url, theirs, tmp_path, 9)
    page, csrf = signed_in(live_url, mine)
    html = page.get("/ui/failed").text
    assert 'href="/ui/failed" aria-current="page"' in html
    assert all(job_id in html for job_id in (a, b, c)) and other not in html
    one = page.post("/ui/failed", data={"csrf": csrf, "one": a})
    assert one.status_code == 202 and "Rerun started for 1 job." in one.text
    assert len(reruns_of(live_url, mine, a)) == 1
    ticked = page.post("/ui/failed", data={"csrf": csrf, "_action": "selected", "ids": [b, c, other]})
    assert "Rerun started for 2 jobs. 1 could not be rerun." in ticked.text  # another's job reads as missing
    assert len(reruns_of(live_url, mine, b)) == len(reruns_of(live_url, mine, c)) == 1
    assert reruns_of(live_url, theirs, other) == []
    assert page.post("/ui/failed", data={"one": a}).status_code == 403  # no CSRF token


def test_an_operator_sees_every_owners_failed_jobs(live_url: str, users: Users, tmp_path: Path) -> None:
    owner, token = users.new("ui-failed")
    job_id = failed(live_url, token, tmp_path, 1)
    page, csrf = signed_in(live_url, "oper-token")
    html = page.get("/ui/failed").text
    assert job_id in html and owner in html
    assert page.post("/ui/failed", data={"csrf": csrf, "one": job_id}).status_code == 202
    assert len(reruns_of(live_url, token, job_id)) == 1  # the rerun is the owner's
