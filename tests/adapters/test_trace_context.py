"""Traces end to end: a caller's trace context over HTTP, MCP and A2A, through a real web app, a real worker and
Redis, to a real OTLP/HTTP receiver that decodes what it gets (`opentelemetry-proto`). With the variable unset,
nothing is sent."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend.devtools.receivers import OtlpReceiver, ReceivedSpan, Receiver
from tasks_backend.serving.tracing import JOB_ID, OPERATION, OWNER
from tests.adapters.mcp.clients.rpc import Legacy
from tests.conftest import ALICE, Serve, make_settings, wait_until
from tests.support.procs import worker_process

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@dataclass
class Stack:
    http: httpx.Client
    receiver: OtlpReceiver


@contextmanager
def stack(serve: Serve, redis_base: str, monkeypatch: pytest.MonkeyPatch, *, traced: bool) -> Iterator[Stack]:
    """A receiver, then the web app and a worker made with the OTLP variables set (or unset) at their creation."""
    receiver = OtlpReceiver()
    try:
        if traced:
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
            monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # spans leave within 50 ms, not 5 s
            monkeypatch.setenv("OTEL_SERVICE_NAME", "tasks-backend-test")
        else:
            for name in [n for n in os.environ if n.startswith("OTEL_")]:
                monkeypatch.delenv(name)
        settings = make_settings(redis_base)
        url = serve(settings)
        # A worker process of its own: a second Celery worker in this process would share Celery's process-wide
        # state with the session's and stop it at its exit.
        with tempfile.TemporaryDirectory() as logs:
            worker = worker_process(settings, Path(logs) / "worker.log", pool="threads", concurrency=2)
            try:
                with httpx.Client(base_url=url, timeout=10) as http:
                    yield Stack(http, receiver)
            finally:
                worker.stop()
    finally:
        receiver.close()


def settle(http: httpx.Client, job_id: str) -> dict[str, Any]:
    return wait_until(lambda: (j := http.get(f"/v1/jobs/{job_id}", headers=ALICE).json())["status"] == "completed"
                      and j, timeout=30, message=f"job {job_id} to complete")


def trace_of(receiver: OtlpReceiver, job_id: str, *names: str) -> dict[str, list[ReceivedSpan]]:
    """The spans of the caller's trace by name, once every one of `names` arrived (the job's own ones for it)."""

    def complete() -> dict[str, list[ReceivedSpan]] | None:
        spans: dict[str, list[ReceivedSpan]] = {}
        for span in receiver.spans():
            if span.trace_id == TRACE_ID and span.attributes.get(JOB_ID, job_id) == job_id:
                spans.setdefault(span.name, []).append(span)
        return spans if all(name in spans for name in names) else None

    return wait_until(complete, timeout=15, message=f"spans {names} of job {job_id}")


def the(spans: dict[str, list[ReceivedSpan]], name: str) -> ReceivedSpan:
    assert len(spans[name]) == 1, spans[name]
    return spans[name][0]


def test_an_http_submit_with_a_traceparent_gives_one_trace_through_the_run_and_each_step(
        serve: Serve, redis_base: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    with stack(serve, redis_base, monkeypatch, traced=True) as s:
        created = s.http.post("/v1/jobs", headers={**ALICE, "traceparent": TRACEPARENT, "tracestate": "x=1"},
                              json={"operation": "test.steps", "params": {"ledger": str(ledger), "steps": 3}})
        assert created.status_code == 202, created.text
        job_id = created.json()["taskId"]
        done = settle(s.http, job_id)
        spans = trace_of(s.receiver, job_id, "POST /v1/jobs", "submit", "queue wait", "run", "step")

    request, submit, wait, run = (the(spans, n) for n in ("POST /v1/jobs", "submit", "queue wait", "run"))
    assert request.parent_id == CALLER_SPAN  # the caller's span is the request's parent
    assert request.attributes["http.response.status_code"] == 202
    assert submit.parent_id == request.span_id
    assert wait.parent_id == submit.span_id and run.parent_id == submit.span_id
    assert sorted(step.attributes["tasks_backend.step.name"] for step in spans["step"]) == ["s0", "s1", "s2"]
    assert all(step.parent_id == run.span_id for step in spans["step"])
    assert request.service == "tasks-backend-test"
    for span in (submit, wait, run):
        assert span.attributes[JOB_ID] == job_id
        assert span.attributes[OPERATION] == "test.steps"
        assert span.attributes[OWNER] == "alice"
    assert run.attributes["tasks_backend.run.outcome"] == "completed"
    # Never the params or the result: no attribute holds the ledger's path or the result's JSON.
    secret_bits = (str(ledger), json.dumps(done["result"]) if "result" in done else '{"steps": 3}')
    for span in (s for group in spans.values() for s in group):
        for key, value in span.attributes.items():
            assert "param" not in key and "result" not in key, key
            assert not any(bit in str(value) for bit in secret_bits), (span.name, key)


def test_a_question_its_answer_and_a_retry_are_spans_of_the_jobs_trace(
        serve: Serve, redis_base: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with stack(serve, redis_base, monkeypatch, traced=True) as s:
        traced = {**ALICE, "traceparent": TRACEPARENT}
        asked = s.http.post("/v1/jobs", headers=traced, json={"operation": "test.ask_pair", "params": {}}).json()
        wait_until(lambda: s.http.get(f"/v1/jobs/{asked['taskId']}", headers=ALICE).json()["status"]
                   == "input_required", timeout=30, message="the question")
        answered = s.http.post(f"/v1/jobs/{asked['taskId']}/input", headers=traced, json={"inputResponses": {
            "name": {"name": "Ada Lovelace"}, "size": {"size": 1815}}})
        assert answered.status_code == 202, answered.text
        settle(s.http, asked["taskId"])
        flaky = s.http.post("/v1/jobs", headers=traced, json={"operation": "test.flaky", "params": {
            "ledger": str(tmp_path / "flaky"), "failures": 1}}).json()
        settle(s.http, flaky["taskId"])
        asking = wait_until(lambda: (t := trace_of(s.receiver, asked["taskId"], "question", "answer", "answered",
                                                   "run")) and len(t["run"]) == 2 and t, message="both runs")
        retrying = wait_until(lambda: (t := trace_of(s.receiver, flaky["taskId"], "retry", "run"))
                              and len(t["run"]) == 2 and t, message="both runs")

    runs = {span.attributes["tasks_backend.run.outcome"]: span for span in asking["run"]}
    parked, resumed = runs["input_required"], runs["completed"]
    assert parked.parent_id == resumed.parent_id == the(asking, "submit").span_id
    assert the(asking, "question").parent_id == parked.span_id
    assert the(asking, "answered").parent_id == resumed.span_id
    assert the(asking, "question").attributes["tasks_backend.question.keys"] == ["name", "size"]
    assert the(asking, "answer").parent_id in {span.span_id for span in asking["POST /v1/jobs/{id}/input"]}
    assert the(asking, "answer").links == ((TRACE_ID, the(asking, "submit").span_id),)
    for span in (s for group in asking.values() for s in group):
        assert not any("Ada" in str(value) or "1815" in str(value) for value in span.attributes.values())
    retry = the(retrying, "retry")
    assert retry.attributes["tasks_backend.retry.error_type"] == "Transient"
    failed_run = next(run for run in retrying["run"] if run.attributes["tasks_backend.run.outcome"] == "queued")
    assert retry.parent_id == failed_run.span_id


def test_an_mcp_meta_traceparent_is_honoured(serve: Serve, redis_base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with stack(serve, redis_base, monkeypatch, traced=True) as s:
        caller = Legacy(s.http, "alice-token")
        caller.initialize()
        created = caller.result("tools/call", {"name": "test.noop", "arguments": {}, "task": {},
                                               "_meta": {"traceparent": TRACEPARENT}})
        job_id = created["task"]["taskId"]
        settle(s.http, job_id)
        spans = trace_of(s.receiver, job_id, "POST /mcp", "submit", "run")
    assert the(spans, "POST /mcp").parent_id == CALLER_SPAN
    assert the(spans, "submit").parent_id == the(spans, "POST /mcp").span_id
    assert the(spans, "run").parent_id == the(spans, "submit").span_id


def test_an_a2a_message_metadata_traceparent_is_honoured(
        serve: Serve, redis_base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with stack(serve, redis_base, monkeypatch, traced=True) as s:
        # A header naming another trace loses to the message's own context.
        headers = {**ALICE, "A2A-Version": "1.0", "traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}
        params = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": {"operation": "test.noop"}}],
                              "metadata": {"traceparent": TRACEPARENT}},
                  "configuration": {"returnImmediately": True}}
        sent = s.http.post("/a2a", headers=headers,
                           json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params})
        job_id = sent.json()["result"]["task"]["id"]
        settle(s.http, job_id)
        spans = trace_of(s.receiver, job_id, "POST /a2a", "submit", "run")
    assert the(spans, "POST /a2a").parent_id == CALLER_SPAN
    assert the(spans, "run").parent_id == the(spans, "submit").span_id


def test_without_the_endpoint_variable_nothing_is_sent(
        serve: Serve, redis_base: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with stack(serve, redis_base, monkeypatch, traced=False) as s:
        created = s.http.post("/v1/jobs", headers={**ALICE, "traceparent": TRACEPARENT},
                              json={"operation": "test.steps", "params": {"ledger": str(tmp_path / "l"), "steps": 2}})
        settle(s.http, created.json()["taskId"])
        # The job ran through the web app and the worker: a traced pair would have sent its spans (in 50 ms
        # batches) while it did; these made none to send.
        assert s.receiver.requests == 0


def test_push_deliveries_from_a_prefork_worker_process_are_spans_of_the_jobs_trace(
        serve: Serve, redis_base: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`tasks-backend worker` as in production: push delivery in its main process, the job in a forked child."""
    receiver, hook = OtlpReceiver(), Receiver()
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    for name, value in otel.items():
        monkeypatch.setenv(name, value)
    settings = make_settings(redis_base, push_allow_private=True)
    worker = worker_process(settings, tmp_path / "worker.log", pool="prefork", concurrency=1,
                            TASKS_BACKEND_PUSH_ALLOW_PRIVATE="1", **otel)
    try:
        with httpx.Client(base_url=serve(settings), timeout=10) as http:
            params = {"message": {"messageId": "m1", "role": "ROLE_USER", "metadata": {"traceparent": TRACEPARENT},
                                  "parts": [{"data": {"operation": "test.steps",
                                                      "params": {"ledger": str(tmp_path / "l"), "steps": 1}}}]},
                      "configuration": {"returnImmediately": True,
                                        "taskPushNotificationConfig": {"url": hook.url, "token": "tok-secret"}}}
            sent = http.post("/a2a", headers={**ALICE, "A2A-Version": "1.0"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params})
            job_id = sent.json()["result"]["task"]["id"]
            wait_until(lambda: "TASK_STATE_COMPLETED" in hook.states(), 60, message="the final notification")
            spans = trace_of(receiver, job_id, "submit", "run", "step", "push delivery")
    finally:
        worker.stop()
        receiver.close()
        hook.close()
    submit = the(spans, "submit")
    assert the(spans, "run").parent_id == submit.span_id and the(spans, "step").parent_id == the(spans, "run").span_id
    for delivery in spans["push delivery"]:
        assert delivery.parent_id == submit.span_id
        assert delivery.attributes[OWNER] == "alice" and delivery.attributes[OPERATION] == "test.steps"
        assert not any(hook.url in str(v) or "tok-secret" in str(v) for v in delivery.attributes.values())
