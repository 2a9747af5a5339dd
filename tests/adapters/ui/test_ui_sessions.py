"""Web page sessions over real HTTP: a session lasts no longer than the credential that opened it (that very token,
or a JWT's expiry), and the rights it acts with are read at each request, never kept in the cookie."""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

import httpx
import jwt

from tasks_backend.access.auth import JWT_LEEWAY_S, token_digest
from tests.conftest import ALICE, Serve, make_settings, wait_until

SECRET = "k" * 32




def sign_in(page: httpx.Client, token: str) -> httpx.Response:
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.get("/ui/signin").text)
    assert csrf
    return page.post("/ui/signin", data={"csrf": csrf[1], "token": token})


def signed_out(reply: httpx.Response) -> bool:
    return reply.status_code == 303 and reply.headers["location"].startswith("/ui/signin")


def submit(url: str, headers: dict[str, str]) -> str:
    reply = httpx.post(f"{url}/v1/jobs", json={"operation": "test.noop", "params": {}}, headers=headers, timeout=10)
    assert reply.status_code == 202, reply.text
    job_id: str = reply.json()["taskId"]
    return job_id


def test_a_session_ends_with_the_token_that_opened_it_though_its_principal_keeps_another(
        redis_base: str, serve: Serve, tmp_path: Path) -> None:
    """Rotating a token (add the new one, remove the old) ends the sessions the old one opened."""
    old, new = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"carol:{token_digest(old)}\ncarol:{token_digest(new)}\n")
    url = serve(make_settings(redis_base, tokens_file=str(tokens)))
    job = submit(url, {"Authorization": f"Bearer {old}"})
    with httpx.Client(base_url=url, timeout=10) as with_old, httpx.Client(base_url=url, timeout=10) as with_new:
        assert sign_in(with_old, old).status_code == 303 and sign_in(with_new, new).status_code == 303
        assert with_old.get(f"/ui/jobs/{job}").status_code == 200
        tokens.write_text(f"carol:{token_digest(new)}\n")
        assert signed_out(with_old.get(f"/ui/jobs/{job}"))
        assert with_new.get(f"/ui/jobs/{job}").status_code == 200  # the new token's session goes on
        # A digest file that names the token as someone else's now does not carry the session across either.
        tokens.write_text(f"dave:{token_digest(new)}\n")
        assert signed_out(with_new.get(f"/ui/jobs/{job}"))


def test_admin_rights_are_read_at_each_request_not_kept_in_the_cookie(redis_base: str, serve: Serve) -> None:
    """The same session (one secret, one store) on a server that made `ops` an admin and on one that no longer does,
    as across a restart that dropped `ops` from TASKS_BACKEND_ADMINS."""
    settings = make_settings(redis_base, ui_secret=secrets.token_urlsafe(32))
    was_admin, no_longer = serve(settings), serve(settings.with_(admins=()))
    job = submit(was_admin, ALICE)
    with httpx.Client(base_url=was_admin, timeout=10) as page:
        assert sign_in(page, "ops-token").status_code == 303
        assert page.get(f"/ui/jobs/{job}").status_code == 200
        cookies = page.cookies
        with httpx.Client(base_url=no_longer, timeout=10, cookies=cookies) as same_session:
            assert same_session.get("/ui/jobs").status_code == 200  # still signed in, as ops
            assert same_session.get(f"/ui/jobs/{job}").status_code == 404


def test_a_page_session_ends_at_its_jwts_expiry_whatever_its_subject(redis_base: str, serve: Serve) -> None:
    """Even when the subject is spelled like a static principal that holds a token (`alice`). Its expiry is the
    API's: `exp` plus the clock leeway the API gives every JWT."""
    url = serve(make_settings(redis_base, jwt_secret=SECRET))
    short = jwt.encode({"sub": "alice", "exp": int(time.time()) - JWT_LEEWAY_S + 3}, SECRET, algorithm="HS256")
    with httpx.Client(base_url=url, timeout=10) as page:
        assert sign_in(page, short).status_code == 303
        assert page.get("/ui/jobs").status_code == 200
        wait_until(lambda: signed_out(page.get("/ui/jobs")), 30, interval=0.25,
                   message="the session to end with its JWT")
        # A JWT the API no longer takes opens no session.
        stale = jwt.encode({"sub": "alice", "exp": int(time.time()) - JWT_LEEWAY_S - 5}, SECRET, algorithm="HS256")
        assert sign_in(page, stale).status_code == 401


def test_the_page_takes_a_jwt_exactly_while_the_api_does(redis_base: str, serve: Serve) -> None:
    """A JWT past its `exp` but within the leeway: the API takes it, so signing in with it does too, and the
    session ends when the API stops taking it (not before, not after)."""
    url = serve(make_settings(redis_base, jwt_secret=SECRET))
    late = jwt.encode({"sub": "late", "exp": int(time.time()) - JWT_LEEWAY_S + 4}, SECRET, algorithm="HS256")
    api = {"Authorization": f"Bearer {late}"}
    with httpx.Client(base_url=url, timeout=10) as page:
        assert httpx.get(f"{url}/v1/jobs", headers=api, timeout=10).status_code == 200
        assert sign_in(page, late).status_code == 303
        assert page.get("/ui/jobs").status_code == 200

        wait_until(lambda: signed_out(page.get("/ui/jobs")), 30, interval=0.1, message="the session to end")
        # The API stops taking it at the same moment (one clock, one leeway): within a second, not 30 s later.
        wait_until(lambda: httpx.get(f"{url}/v1/jobs", headers=api, timeout=10).status_code == 401, 2,
                   interval=0.05, message="the API to refuse the JWT the session ended with")


def test_a_jwt_session_ends_where_jwts_are_no_longer_taken(redis_base: str, serve: Serve) -> None:
    """One session secret, a server that takes JWTs and one restarted without them: the session ends on the latter."""
    settings = make_settings(redis_base, ui_secret=secrets.token_urlsafe(32), jwt_secret=SECRET)
    takes, no_longer = serve(settings), serve(settings.with_(jwt_secret=None))
    long = jwt.encode({"sub": "svc", "exp": int(time.time()) + 3600}, SECRET, algorithm="HS256")
    with httpx.Client(base_url=takes, timeout=10) as page:
        assert sign_in(page, long).status_code == 303 and page.get("/ui/jobs").status_code == 200
        with httpx.Client(base_url=no_longer, timeout=10, cookies=page.cookies) as same_session:
            assert signed_out(same_session.get("/ui/jobs"))
