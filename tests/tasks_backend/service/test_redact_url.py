"""`redact_url`: what the run banner and the refusals print of a URL the user gave keeps none of its
credentials, whichever of the forms redis-py and kombu take them in."""

from __future__ import annotations

import pytest

from tasks_backend.service.runtime import redact_url


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("amqp://app:s3cret@rabbit//", "amqp://app:***@rabbit//"),
    ("redis://127.0.0.1:6379/0?password=s3cret", "redis://127.0.0.1:6379/0?password=***"),
    ("redis://127.0.0.1/0?username=ops&password=s3cret&socket_timeout=5",
     "redis://127.0.0.1/0?username=***&password=***&socket_timeout=5"),
    ("rediss://h/0?Password=s3cret", "rediss://h/0?Password=***"),
    ("redis://h/0?pass%77ord=s3cret", "redis://h/0?pass%77ord=***"),
    ("unix:///run/redis.sock?db=1&password=s3cret", "unix:///run/redis.sock?db=1&password=***"),
    ("sentinel://:s3cret@a:26379/0;sentinel://b:26379/0?password=s3cret",
     "sentinel://:***@a:26379/0;sentinel://b:26379/0?password=***"),
    ("sentinel://a:26379/0?username=ops&password=s3cret",
     "sentinel://a:26379/0?username=***&password=***"),
    ("redis://[s3cret@host/0", "***"),
])
def test_no_credential_of_a_url_is_shown(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url)
