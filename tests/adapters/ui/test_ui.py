"""The web page for people, in a real browser (Debian's chromium driven by Playwright) over real HTTP,
with a real worker running the demo jobs.

`UI_SCREENSHOTS=docs` writes the README's screenshots of the three pages while the tests run.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import Users, bearer, wait_until

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = os.environ.get("UI_SCREENSHOTS")

pytestmark = pytest.mark.usefixtures("worker")
sync_api = pytest.importorskip("playwright.sync_api", reason="the `test` extra installs playwright")
if not Path(CHROMIUM).exists():
    pytest.skip(f"no chromium at {CHROMIUM} (`make ui-browser` installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def person(users: Users) -> tuple[str, str]:
    return users.new("person")


@pytest.fixture
def page(browser: Any, live_url: str) -> Iterator[Any]:
    context = browser.new_context(base_url=live_url, viewport={"width": 1000, "height": 760})
    context.set_default_timeout(15_000)
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()


def sign_in(page: Any, token: str) -> None:
    page.goto("/ui/jobs")
    assert page.url.endswith("/ui/signin?next=/ui/jobs")
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'token'")
    page.keyboard.type(token)  # the token field has the focus: keyboard only
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: urlsplit(url).path == "/ui/jobs")


def submit(live_url: str, token: str, operation: str, params: dict[str, Any]) -> str:
    response = httpx.post(f"{live_url}/v1/jobs", json={"operation": operation, "params": params},
                          headers=bearer(token), timeout=10)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["taskId"]
    return job_id


def status_of(live_url: str, token: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{live_url}/v1/jobs/{job_id}", headers=bearer(token), timeout=10).json()
    return body


def wait_status(live_url: str, token: str, job_id: str, status: str, timeout: float = 20) -> dict[str, Any]:
    body: dict[str, Any] = wait_until(lambda: (b := status_of(live_url, token, job_id))["status"] == status and b,
                                      timeout, message=f"job {job_id} to be {status}")
    return body


def csrf_of(page: Any) -> str:
    token: str = page.locator('input[name="csrf"]').first.input_value()
    return token


def test_sign_in_and_watch_a_job_complete_with_its_progress_bar_moving(page: Any, live_url: str,
                                                                      person: tuple[str, str]) -> None:
    page.goto("/ui/signin")
    page.fill("#token", "not-a-token")
    page.get_by_role("button", name="Sign in").click()
    assert page.locator("#token-error").inner_text() == "That token was not accepted."
    sign_in(page, person[1])
    assert page.locator(".who").inner_text() == person[0]

    job_id = submit(live_url, person[1], "demo.sleep", {"seconds": 3, "steps": 12})
    page.goto(f"/ui/jobs/{job_id}")
    assert page.locator("h1").inner_text().startswith("demo.sleep")
    seen: list[float] = []

    def completed() -> bool:
        try:
            value, status = page.evaluate(
                "() => [document.querySelector('#job [data-bar]')?.value ?? null,"
                " document.querySelector('#job')?.dataset.status ?? null]")
        except sync_api.Error:  # the page is being replaced by the finished job's page
            return False
        if value is not None and (not seen or seen[-1] != value):
            seen.append(value)
        return bool(status == "completed")

    wait_until(completed, 30, interval=0.05, message="the job page to show the job completed")
    moving = [v for v in seen if 0 < v < 12]
    assert len(moving) >= 2 and moving == sorted(moving), seen  # the bar moved forward, more than once
    assert page.locator("#job [data-status-text]").inner_text() == "completed"
    assert '"slept": 3' in page.locator("pre.json").inner_text()
    assert page.locator("#timeline li").count() >= 3  # submitted, working..., completed
    assert "completed" in page.locator("#timeline li").last.inner_text()
    assert page.locator("text=Cancel job").count() == 0

    page.click("nav >> text=My jobs")
    row = page.locator(f'li[data-job="{job_id}"]')
    assert row.locator("[data-status-text]").inner_text() == "completed"
    assert row.locator("progress").evaluate("b => b.value === b.max")


def test_the_job_list_updates_itself_filters_and_pages(page: Any, live_url: str, person: tuple[str, str]) -> None:
    sign_in(page, person[1])
    done = [submit(live_url, person[1], "test.noop", {}) for _ in range(21)]
    for job_id in done:
        wait_status(live_url, person[1], job_id, "completed")
    running = submit(live_url, person[1], "demo.sleep", {"seconds": 1.5, "steps": 5})
    page.goto("/ui/jobs")
    rows = page.locator("li[data-job]")
    assert rows.first.get_attribute("data-job") == running  # newest first
    assert rows.count() == 20
    page.wait_for_selector(f'li[data-job="{running}"][data-status="completed"]')  # without a reload

    page.select_option("#status", "completed")
    page.click("text=Filter")
    assert page.url.endswith("/ui/jobs?status=completed")
    page.click("text=Older jobs")
    assert page.locator("li[data-job]").count() == 2
    assert page.locator("li[data-job]").last.get_attribute("data-job") == done[0]
    page.set_viewport_size({"width": 380, "height": 760})  # a phone: nothing wider than the screen
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_answer_a_refund_approval_and_see_the_servers_message_for_a_wrong_answer(
        page: Any, live_url: str, person: tuple[str, str]) -> None:
    sign_in(page, person[1])
    job_id = submit(live_url, person[1], "demo.refund", {"order_id": "A-1001", "amount": 42.5})
    wait_status(live_url, person[1], job_id, "input_required")
    page.click("nav >> text=Waiting for me")
    section = page.locator(f'section[data-job="{job_id}"]')
    assert "Approve a refund of 42.50 for order A-1001?" in section.inner_text()
    assert section.get_by_role("group", name="approved (required)").count() == 1

    # A post the browser would have stopped (the required choice left out) is answered by the server.
    section.locator("form").evaluate("f => { f.noValidate = true; }")
    section.get_by_role("button", name="Send answer").click()
    error = page.locator('[data-field-error="approval.approved"]')
    assert error.inner_text() == "approved: required"
    assert page.locator(f'section[data-job="{job_id}"] fieldset.choices').get_attribute(
        "aria-describedby").endswith("-err")
    assert status_of(live_url, person[1], job_id)["status"] == "input_required"

    section = page.locator(f'section[data-job="{job_id}"]')
    section.get_by_label("Yes").check()
    section.locator('input[name="approval.reason"]').fill("damaged in transit")
    section.get_by_role("button", name="Send answer").click()
    page.wait_for_url("**/ui/waiting?notice=answered")
    assert page.locator(f'section[data-job="{job_id}"]').count() == 0
    result = wait_status(live_url, person[1], job_id, "completed")["result"]
    assert result["status"] == "approved" and result["orderId"] == "A-1001"


def test_every_kind_of_question_as_a_form_on_the_jobs_page(page: Any, live_url: str,
                                                          person: tuple[str, str]) -> None:
    sign_in(page, person[1])
    job_id = submit(live_url, person[1], "test.form", {})
    wait_status(live_url, person[1], job_id, "input_required")
    page.goto(f"/ui/jobs/{job_id}")
    form = page.locator("form.questions")
    assert form.get_by_role("group", name="Delivery speed (required)").count() == 1
    boxes = form.get_by_label("Boxes (required)")
    assert [boxes.get_attribute(a) for a in ("type", "min", "max", "step", "required")] == \
        ["number", "1", "20", "1", ""]
    assert boxes.evaluate("e => e.getAttribute('aria-describedby').split(' ')"
                          ".map(id => document.getElementById(id).textContent)") == [
        "How many boxes to ship", "A whole number; at least 1; at most 20."]
    email = form.get_by_label("Email for tracking")
    assert (email.get_attribute("type"), email.get_attribute("maxlength")) == ("email", "120")
    assert form.get_by_role("group", name="Gift wrap").get_by_label("No").is_checked()  # the schema's default

    # A choice the page did not offer: the server's message lands beside that field.
    form.get_by_label("Express (next day)").evaluate("e => { e.value = 'overnight'; }")
    form.get_by_label("Express (next day)").check()
    boxes.fill("3")
    form.get_by_role("button", name="Send answer").click()
    assert page.locator('[data-field-error="shipping.speed"]').inner_text() == \
        "speed: must be one of ['standard', 'express']"
    form = page.locator("form.questions")
    assert form.get_by_label("Boxes (required)").input_value() == "3"  # what was typed is kept

    form.get_by_label("Express (next day)").check()
    form.get_by_label("Weight (kg)").fill("2.5")
    form.get_by_label("Email for tracking").fill("ops@example.com")
    form.get_by_role("group", name="Gift wrap").get_by_label("Yes").check()
    form.get_by_role("button", name="Send answer").click()
    page.wait_for_url(f"**/ui/jobs/{job_id}?notice=answered")
    result = wait_status(live_url, person[1], job_id, "completed")["result"]
    assert result == {"speed": "express", "boxes": 3, "weight": 2.5, "email": "ops@example.com", "gift": True}


def test_a_question_with_nullable_fields_is_answered_on_the_jobs_page(page: Any, live_url: str,
                                                                     person: tuple[str, str]) -> None:
    """`"type": ["string", "null"]` (marshmallow's `allow_none=True`) is a field like any other, which may be left
    empty: left empty, the answer is null."""
    sign_in(page, person[1])
    job_id = submit(live_url, person[1], "test.ask_nullable", {})
    wait_status(live_url, person[1], job_id, "input_required")
    page.goto(f"/ui/jobs/{job_id}")
    form = page.locator("form.questions")
    assert "cannot be answered here" not in form.inner_text()
    note, copies = form.get_by_label("note"), form.get_by_label("copies")
    assert (note.get_attribute("type"), note.get_attribute("required")) == ("text", None)
    assert (copies.get_attribute("type"), copies.get_attribute("required")) == ("number", None)
    assert copies.evaluate("e => document.getElementById(e.getAttribute('aria-describedby').split(' ')[1])"
                           ".textContent") == "A whole number; may be left empty."
    note.fill("leave it at the door")
    form.get_by_role("button", name="Send answer").click()
    page.wait_for_url(f"**/ui/jobs/{job_id}?notice=answered")
    result = wait_status(live_url, person[1], job_id, "completed")["result"]
    assert result == {"note": "leave it at the door", "copies": None}


def test_cancel_a_job_from_its_page(page: Any, live_url: str, person: tuple[str, str]) -> None:
    sign_in(page, person[1])
    job_id = submit(live_url, person[1], "demo.sleep", {"seconds": 60, "steps": 60})
    wait_until(lambda: status_of(live_url, person[1], job_id).get("progress"), 20, message="the job to start")
    page.goto(f"/ui/jobs/{job_id}")
    page.route("**/events?*", lambda route: route.abort())  # hold the page still to read what cancel answered
    page.get_by_role("button", name="Cancel job").click()
    # Cancel answers the job as it then stands: a running job stops at its next cancellation check.
    assert re.fullmatch(r"Cancel requested: the job is now (working|cancelled)\.", page.locator(".notice").inner_text())
    wait_status(live_url, person[1], job_id, "cancelled")
    page.goto(f"/ui/jobs/{job_id}")
    assert page.locator("#job").get_attribute("data-status") == "cancelled"
    assert "cancelled" in page.locator("#timeline li").last.inner_text()
    assert page.locator("text=Cancel job").count() == 0
    assert page.request.post(f"/ui/jobs/{job_id}/cancel", form={"csrf": csrf_of(page)}).status == 409


def test_another_owners_job_is_refused_exactly_like_a_missing_one(page: Any, live_url: str, users: Users,
                                                                  person: tuple[str, str]) -> None:
    _, other_token = users.new("other")
    theirs = submit(live_url, other_token, "demo.refund", {"order_id": "B-7", "amount": 1})
    wait_status(live_url, other_token, theirs, "input_required")
    sign_in(page, person[1])
    missing = str(uuid.uuid4())
    answers = []
    for job_id in (theirs, missing):
        response = page.goto(f"/ui/jobs/{job_id}")
        answers.append((response.status, page.locator("main").inner_html()))
        assert job_id not in page.content()
    assert answers[0] == answers[1] and answers[0][0] == 404
    csrf = csrf_of(page)
    for path, form in (("events", None), ("cancel", {"csrf": csrf}),
                       ("input", {"csrf": csrf, "approval.approved": "true"})):
        replies = [page.request.post(f"/ui/jobs/{j}/{path}", form=form) if form else
                   page.request.get(f"/ui/jobs/{j}/{path}") for j in (theirs, missing)]
        assert [r.status for r in replies] == [404, 404], path
        assert replies[0].text() == replies[1].text()
    assert status_of(live_url, other_token, theirs)["status"] == "input_required"  # untouched


def test_sign_out_ends_the_session(page: Any, live_url: str, person: tuple[str, str]) -> None:
    sign_in(page, person[1])
    job_id = submit(live_url, person[1], "test.noop", {})
    page.goto("/ui/jobs")
    cookie = next(c for c in page.context.cookies() if c["name"] == "tb_ui_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert person[1] not in cookie["value"]
    page.click("text=Sign out")
    page.wait_for_url("**/ui/signin")
    # What is left is an anonymous session, holding only the sign-in form's CSRF token.
    assert [c["value"] for c in page.context.cookies() if c["name"] == "tb_ui_session"] != [cookie["value"]]
    page.goto(f"/ui/jobs/{job_id}")
    assert re.search(r"/ui/signin\?next=", page.url) and "test.noop" not in page.content()


def test_no_job_data_without_a_valid_session(live_url: str, person: tuple[str, str]) -> None:
    job_id = submit(live_url, person[1], "test.noop", {})
    with httpx.Client(base_url=live_url, timeout=10) as anonymous:
        for path in ("/ui/jobs", "/ui/waiting", f"/ui/jobs/{job_id}"):
            for cookie in (None, "forged.value.here"):
                anonymous.cookies.clear()
                if cookie:
                    anonymous.cookies.set("tb_ui_session", cookie, path="/ui")
                reply = anonymous.get(path)
                assert reply.status_code == 303 and reply.headers["location"].startswith("/ui/signin")
                assert "test.noop" not in reply.text  # the redirect names the page asked for, nothing of the job
        assert anonymous.get(f"/ui/jobs/{job_id}/events").status_code == 401
        # A bearer header is not a session: the page never takes one.
        assert anonymous.get(f"/ui/jobs/{job_id}", headers=bearer(person[1])).status_code == 303
        # Every POST needs the session's CSRF token, signing in included.
        assert anonymous.post("/ui/signin", data={"token": person[1]}).status_code == 403
        assert anonymous.post(f"/ui/jobs/{job_id}/cancel").status_code == 403


@contextlib.contextmanager
def signed_in(live_url: str, token: str) -> Iterator[httpx.Client]:
    """A plain HTTP client holding a page session, as a browser would."""
    with httpx.Client(base_url=live_url, timeout=10) as client:
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/signin").text)
        assert csrf
        assert client.post("/ui/signin", data={"csrf": csrf[1], "token": token}).status_code == 303
        yield client


def test_errors_are_mapped_as_everywhere_else_and_shown_as_pages(live_url: str, person: tuple[str, str]) -> None:
    job_id = submit(live_url, person[1], "test.noop", {})
    wait_status(live_url, person[1], job_id, "completed")
    with signed_in(live_url, person[1]) as client:
        for path, status, words in (("/ui/jobs?cursor=nonsense", 400, "The cursor is not valid."),
                                    ("/ui/jobs?status=sleeping", 400, "Unknown status"),
                                    ("/ui/jobs/not-an-id", 404, "Not found")):
            reply = client.get(path)
            assert (reply.status_code, reply.headers["content-type"]) == (status, "text/html; charset=utf-8")
            assert words in reply.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/jobs").text)
        assert csrf
        reply = client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf[1]})
        assert reply.status_code == 409 and "The job has already finished." in reply.text
        reply = client.post(f"/ui/jobs/{job_id}/input", data={"csrf": csrf[1], "approval.approved": "true"})
        assert reply.status_code == 409 and "Not waiting for input" in reply.text


def test_a_session_ends_when_its_token_is_removed(live_url: str, users: Users) -> None:
    name, token = users.new("leaving")
    job_id = submit(live_url, token, "test.noop", {})
    with signed_in(live_url, token) as browser_like:
        assert browser_like.get(f"/ui/jobs/{job_id}").status_code == 200
        users.path.write_text("".join(line for line in users.path.read_text().splitlines(keepends=True)
                                      if not line.startswith(f"{name}:")))
        reply = browser_like.get(f"/ui/jobs/{job_id}")
        assert reply.status_code == 303 and reply.headers["location"].startswith("/ui/signin")


@pytest.mark.skipif(not SCREENSHOTS, reason="UI_SCREENSHOTS=docs writes the README's screenshots")
def test_screenshots_of_the_three_pages(browser: Any, live_url: str, users: Users) -> None:
    _, token = users.new("dana")
    context = browser.new_context(base_url=live_url, viewport={"width": 900, "height": 640})
    page = context.new_page()
    sign_in(page, token)
    for operation, params in (("demo.export", {"rows": 2500}), ("demo.fail", {"message": "the ledger is locked"}),
                              ("demo.refund", {"order_id": "A-1001", "amount": 42.5}), ("test.form", {})):
        submit(live_url, token, operation, params)
    cancelled = submit(live_url, token, "demo.sleep", {"seconds": 60})
    httpx.post(f"{live_url}/v1/jobs/{cancelled}/cancel", headers=bearer(token), timeout=10)
    running = submit(live_url, token, "demo.sleep", {"seconds": 20, "steps": 20})
    wait_until(lambda: (status_of(live_url, token, running).get("progress") or {}).get("done", 0) >= 7, 30,
               message="the job to be a third of the way")
    out = Path(SCREENSHOTS or ".")
    page.goto("/ui/jobs")
    page.screenshot(path=str(out / "ui-jobs.png"), full_page=True)
    page.goto(f"/ui/jobs/{running}")
    page.screenshot(path=str(out / "ui-job.png"), full_page=True)
    page.goto("/ui/waiting")
    page.screenshot(path=str(out / "ui-waiting.png"), full_page=True)
    context.close()
