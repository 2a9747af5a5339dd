"""The web page lists the signed-in person's schedules (and nobody else's), over real HTTP."""

from __future__ import annotations

import re

import httpx

from tests.conftest import Users, bearer


def page_of(live_url: str, token: str) -> str:
    """The schedules page as the holder of `token` sees it once signed in."""
    with httpx.Client(base_url=live_url, timeout=10) as page:
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.get("/ui/signin").text)
        assert csrf
        assert page.post("/ui/signin", data={"csrf": csrf[1], "token": token}).status_code == 303
        return page.get("/ui/schedules").text


def test_the_page_lists_my_schedules_only(live_url: str, users: Users) -> None:
    _, mine = users.new("ui-sched")
    _, theirs = users.new("ui-sched")
    for token, name, when in ((mine, "nightly-export", {"cron": "0 3 * * *", "timezone": "Europe/Paris"}),
                              (theirs, "their-own", {"everySeconds": 60})):
        made = httpx.post(f"{live_url}/v1/schedules", headers=bearer(token), timeout=10,
                          json={"name": name, "operation": "demo.export", "params": {"rows": 1}, **when})
        assert made.status_code == 201, made.text
    httpx.post(f"{live_url}/v1/schedules/nightly-export/pause", headers=bearer(mine), timeout=10)
    html = page_of(live_url, mine)
    assert 'href="/ui/schedules" aria-current="page"' in html
    assert "nightly-export" in html and "0 3 * * *" in html and "Europe/Paris" in html and "paused" in html
    assert "their-own" not in html
    html = page_of(live_url, theirs)
    assert "their-own" in html and "every 60 s" in html and "nightly-export" not in html
    with httpx.Client(base_url=live_url, timeout=10) as anonymous:
        assert anonymous.get("/ui/schedules").status_code == 303  # sign in first
