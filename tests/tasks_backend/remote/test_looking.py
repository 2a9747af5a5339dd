"""The poller's looks side by side: at most `PER_HOST` at one host (scheme, name, port) at once, the next one
refused rather than waiting; one look per job at a time; looks not started when stopped are dropped."""

from __future__ import annotations

import threading

from tasks_backend.remote.looking import PER_HOST, HostLimit, Lookers, host_of
from tests.conftest import wait_until


def test_a_host_at_its_limit_refuses_another_look_until_one_ends() -> None:
    hosts = HostLimit()
    slow = "http://slow.example:8080/mcp"
    with hosts.hold([slow]) as first, hosts.hold(["HTTP://Slow.example:8080/a2a"]) as second:
        assert first and second and PER_HOST == 2
        with hosts.hold([slow]) as third:
            assert not third  # put off, not waited for
        with hosts.hold(["http://slow.example:8081/mcp"]) as other_port, hosts.hold(["https://fast.example"]) as o:
            assert other_port and o
        with hosts.hold(["https://fast.example", slow]) as both:
            assert not both  # all or nothing
        with hosts.hold(["https://fast.example"]) as fast_again, hosts.hold(["https://fast.example"]) as again:
            assert fast_again and again  # the refused `both` took nothing there
    with hosts.hold([slow]) as after:
        assert after


def test_a_job_is_looked_at_once_at_a_time_and_a_stop_drops_the_looks_not_started() -> None:
    lookers = Lookers(size=1)
    release, ran = threading.Event(), []

    def hold() -> None:
        ran.append("held")
        release.wait(10)

    assert lookers.submit("a", hold)
    wait_until(lambda: ran == ["held"], message="the first look to start")
    assert not lookers.submit("a", lambda: ran.append("twice"))  # still in flight
    assert lookers.submit("b", lambda: ran.append("b"))  # queued behind the only thread
    lookers.stop()
    release.set()
    wait_until(lambda: not lookers.in_flight() - {"b"}, message="the held look to end")
    assert ran == ["held"]
    assert not lookers.submit("c", lambda: ran.append("c"))


def test_a_host_is_the_same_with_its_implied_port_and_a_bad_port_is_no_error() -> None:
    hosts = HostLimit(per_host=1)
    with hosts.hold(["http://a.example/mcp"]) as first, hosts.hold(["http://A.example:80/a2a"]) as second:
        assert first and not second
    assert host_of("http://a.example:99999/x") == "http://a.example:80"
