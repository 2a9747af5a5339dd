"""`/v1/schedules` over real HTTP, a real Redis and a real worker; ticks made by the ticker's own API."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import ALICE, Serve, Users, bearer, make_settings, wait_until

pytestmark = pytest.mark.usefixtures("worker")


def principal(users: Users) -> tuple[str, dict[str, str]]:
    name, token = users.new("sched")
    return name, bearer(token)


def define(http: httpx.Client, headers: dict[str, str], **body: Any) -> httpx.Response:
    return http.post("/v1/schedules", json=body, headers=headers)


def test_define_is_201_the_same_again_200_another_409(http: httpx.Client, users: Users) -> None:
    _, me = principal(users)
    body = {"name": "tidy", "operation": "test.noop", "params": {}, "cron": "*/5 * * * *",
            "timezone": "Europe/Paris"}
    made = define(http, me, **body)
    assert made.status_code == 201, made.text
    assert made.headers["Location"] == "/v1/schedules/tidy"
    schedule = made.json()
    assert schedule | {"nextRunAt": None} == {
        "name": "tidy", "operation": "test.noop", "params": {}, "cron": "*/5 * * * *", "timezone": "Europe/Paris",
        "catchUp": "latest", "priority": 5, "paused": False, "nextRunAt": None, "lastRunAt": None,
        "lastJobId": None}
    assert schedule["nextRunAt"].endswith(":00.000Z") and int(schedule["nextRunAt"][14:16]) % 5 == 0
    again = define(http, me, **body, catchUp="latest")  # the defaults spelt out are the same definition
    assert again.status_code == 200 and again.json() == schedule
    other = define(http, me, **{**body, "cron": "*/10 * * * *"})
    assert other.status_code == 409 and other.headers["Content-Type"] == "application/problem+json"
    assert http.get("/v1/schedules/tidy", headers=me).json() == schedule
    assert [s["name"] for s in http.get("/v1/schedules", headers=me).json()["schedules"]] == ["tidy"]


def test_optional_fields_read_as_a_jobs_do(http: httpx.Client, users: Users) -> None:
    """`null` for an optional field is its default, and 60.0 is the integer 60 (as `priority` and `delayMs` of a
    job: JavaScript and protobuf clients send numbers as doubles): the same definition, not a 422 or a 409."""
    _, me = principal(users)
    body = {"name": "nulls", "operation": "test.noop", "params": {}, "everySeconds": 60}
    made = define(http, me, **body)
    assert made.status_code == 201, made.text
    again = define(http, me, **{**body, "everySeconds": 60.0, "timezone": None, "catchUp": None, "priority": 5.0,
                                "cron": None})
    assert again.status_code == 200, again.text
    assert again.json() == made.json()
    assert define(http, me, **{**body, "name": "whole", "priority": 7.0}).json()["priority"] == 7


def test_another_owners_schedule_is_a_404_like_a_missing_one(http: httpx.Client, users: Users) -> None:
    _, me = principal(users)
    _, other = principal(users)
    assert define(http, me, name="mine", operation="test.noop", everySeconds=60).status_code == 201
    missing = http.get("/v1/schedules/nothing", headers=other)
    assert missing.status_code == 404
    for method, path in (("GET", "/v1/schedules/mine"), ("DELETE", "/v1/schedules/mine"),
                         ("POST", "/v1/schedules/mine/pause"), ("POST", "/v1/schedules/mine/resume")):
        answer = http.request(method, path, headers=other)
        assert answer.status_code == 404 and answer.json()["detail"] == missing.json()["detail"], (method, path)
    assert http.get("/v1/schedules", headers=other).json() == {"schedules": [], "nextCursor": None}
    # The other owner may use the name for a schedule of its own.
    assert define(http, other, name="mine", operation="test.noop", everySeconds=5).status_code == 201
    assert http.get("/v1/schedules/mine", headers=me).json()["everySeconds"] == 60


def test_pause_resume_and_delete(http: httpx.Client, users: Users) -> None:
    _, me = principal(users)
    assert define(http, me, name="p", operation="test.noop", everySeconds=3600).status_code == 201
    paused = http.post("/v1/schedules/p/pause", headers=me)
    assert paused.status_code == 200 and paused.json()["paused"] is True
    resumed = http.post("/v1/schedules/p/resume", headers=me).json()
    assert resumed["paused"] is False and resumed["nextRunAt"]
    assert http.delete("/v1/schedules/p", headers=me).status_code == 204
    assert http.get("/v1/schedules/p", headers=me).status_code == 404
    assert http.delete("/v1/schedules/p", headers=me).status_code == 404


GOOD = {"name": "ok", "operation": "test.noop", "params": {}, "everySeconds": 5}


@pytest.mark.parametrize(("change", "field"), [
    ({"cron": "61 * * * *", "everySeconds": None}, "cron"),
    ({"cron": "every day", "everySeconds": None}, "cron"),
    ({"cron": "*/5 * * * *"}, "cron"),  # both
    ({"everySeconds": None}, "cron"),  # neither
    ({"everySeconds": 0}, "everySeconds"),
    ({"everySeconds": 1.5}, "everySeconds"),
    ({"everySeconds": "5"}, "everySeconds"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"timezone": "../../etc/passwd"}, "timezone"),
    ({"timezone": "localtime"}, "timezone"),  # whatever each host's clock is set to: tickers would disagree
    ({"timezone": "right/UTC"}, "timezone"),  # counts leap seconds: ticks 27 s off the wall clock
    ({"catchUp": "some"}, "catchUp"),
    ({"priority": 10}, "priority"),
    ({"priority": -1}, "priority"),
    ({"priority": True}, "priority"),
    ({"priority": 2.5}, "priority"),
    ({"priority": "5"}, "priority"),
    ({"name": "a/b"}, "name"),
    ({"name": ""}, "name"),
    ({"name": "x" * 101}, "name"),
    ({"operation": "no.such"}, "operation"),
    ({"operation": "test.steps", "params": {}}, "ledger"),
    ({"params": 5}, "params"),
    ({"every": 5}, "every"),
])
def test_every_bad_input_is_a_422_naming_its_field(http: httpx.Client, change: dict[str, Any], field: str) -> None:
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    answer = http.post("/v1/schedules", json=body, headers=bearer("alice-token"))
    assert answer.status_code == 422, answer.text
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert field in answer.json()["errors"], answer.json()


def test_each_tick_makes_one_job_listed_under_the_schedule(http: httpx.Client, users: Users,
                                                           runtime: Runtime) -> None:
    name, me = principal(users)
    _, other = principal(users)
    assert define(http, me, name="often", operation="test.noop", everySeconds=1, catchUp="all").status_code == 201
    ticker = runtime.schedules().ticker()

    def jobs() -> list[dict[str, Any]]:
        ticker.tick_once()
        listed: list[dict[str, Any]] = http.get("/v1/jobs", params={"schedule": "often"}, headers=me).json()["jobs"]
        return listed if len(listed) >= 3 else []

    listed = wait_until(jobs, timeout=10, message="three ticks")
    assert all(j["schedule"] == "often" and j["operation"] == "test.noop" for j in listed)
    assert len({j["taskId"] for j in listed}) == len(listed)
    first = listed[-1]["taskId"]
    done = wait_until(lambda: (h := http.get(f"/v1/jobs/{first}", headers=me).json())["status"] == "completed" and h,
                      message="the first tick's job to run")
    assert done["schedule"] == "often"
    schedule = http.get("/v1/schedules/often", headers=me).json()
    assert schedule["lastJobId"] and schedule["lastRunAt"] and schedule["lastJobId"] in {j["taskId"] for j in listed}
    assert runtime.store.get(first).owner == name  # type: ignore[union-attr]
    assert http.get("/v1/jobs", params={"schedule": "often"}, headers=other).json()["jobs"] == []
    page = http.get("/v1/jobs", params={"schedule": "often", "limit": 1}, headers=me).json()
    assert len(page["jobs"]) == 1 and page["nextCursor"]
    # Deleted: no more ticks; the jobs made stay listed.
    assert http.delete("/v1/schedules/often", headers=me).status_code == 204
    ticker.tick_once()
    count = len(http.get("/v1/jobs", params={"schedule": "often", "limit": 200}, headers=me).json()["jobs"])
    ticker.tick_once()
    assert len(http.get("/v1/jobs", params={"schedule": "often", "limit": 200}, headers=me).json()["jobs"]) == count


def test_the_list_is_paged_oldest_first_with_a_cursor(http: httpx.Client, users: Users) -> None:
    _, me = principal(users)
    names = [f"s{i}" for i in range(5)]
    for name in names:
        assert define(http, me, name=name, operation="test.noop", everySeconds=60).status_code == 201
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = http.get("/v1/schedules", params={"limit": 2, **({"cursor": cursor} if cursor else {})},
                        headers=me).json()
        seen += [s["name"] for s in page["schedules"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == names and pages == 3
    assert http.delete("/v1/schedules/s1", headers=me).status_code == 204
    whole = http.get("/v1/schedules", headers=me).json()
    assert [s["name"] for s in whole["schedules"]] == ["s0", "s2", "s3", "s4"] and whole["nextCursor"] is None
    for params in ({"cursor": "not-a-cursor"}, {"limit": 0}, {"limit": 201}, {"limit": "x"}):
        bad = http.get("/v1/schedules", params=params, headers=me)
        assert bad.status_code == 400 and bad.headers["Content-Type"] == "application/problem+json", params


def test_an_owner_may_define_at_most_max_schedules(serve: Serve, redis_base: str) -> None:
    """A new name past the cap is a 409 that says so, and stores nothing; the names held may still be defined
    again (200) or conflict (409 as always); deleting one makes room. Another owner has a cap of its own."""
    url = serve(make_settings(redis_base, max_schedules=2))
    with httpx.Client(base_url=url, timeout=10) as http:
        for name in ("a", "b"):
            assert define(http, ALICE, name=name, operation="test.noop", everySeconds=60).status_code == 201
        over = define(http, ALICE, name="c", operation="test.noop", everySeconds=60)
        assert over.status_code == 409 and over.headers["Content-Type"] == "application/problem+json"
        problem = over.json()
        assert problem["type"].endswith("/schedule-limit-reached") and problem["limit"] == 2, problem
        assert "2 schedules" in problem["detail"] and "Retry-After" not in over.headers
        assert http.get("/v1/schedules/c", headers=ALICE).status_code == 404
        assert define(http, ALICE, name="a", operation="test.noop", everySeconds=60).status_code == 200
        conflict = define(http, ALICE, name="a", operation="test.noop", everySeconds=30)
        assert conflict.status_code == 409 and conflict.json()["type"].endswith("/schedule-conflict")
        assert define(http, bearer("bob-token"), name="c", operation="test.noop", everySeconds=60).status_code == 201
        assert http.delete("/v1/schedules/b", headers=ALICE).status_code == 204
        assert define(http, ALICE, name="c", operation="test.noop", everySeconds=60).status_code == 201
        assert [s["name"] for s in http.get("/v1/schedules", headers=ALICE).json()["schedules"]] == ["a", "c"]


def test_an_expired_schedule_no_longer_counts_against_the_cap(serve: Serve, redis_base: str) -> None:
    """A schedule whose record expired (its sweepers stopped past the TTL ceiling) leaves its name in the owner's
    list; at the cap the list is pruned of such names before a new one is refused."""
    settings = make_settings(redis_base, max_schedules=1)
    url = serve(settings)
    store = build_runtime(settings).store
    with httpx.Client(base_url=url, timeout=10) as http:
        assert define(http, ALICE, name="old", operation="test.noop", everySeconds=60).status_code == 201
        assert define(http, ALICE, name="new", operation="test.noop", everySeconds=60).status_code == 409
        store.redis.delete(store.keys.schedule("alice", "old"))  # what its TTL does
        assert define(http, ALICE, name="new", operation="test.noop", everySeconds=60).status_code == 201
        assert [s["name"] for s in http.get("/v1/schedules", headers=ALICE).json()["schedules"]] == ["new"]
