"""The tracing switch: off without the endpoint variable (no-op, nothing made), and what a span records."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from tasks_backend.serving.tracing import Tracing

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_without_an_endpoint_tracing_is_off_and_does_nothing() -> None:
    tracing = Tracing.from_env({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_ENDPOINT": "  "})
    assert not tracing.enabled and tracing.provider is None
    with tracing.span("submit", parent=TRACEPARENT) as span:
        assert span is None
        assert tracing.traceparent() is None
    assert tracing.extract({"traceparent": TRACEPARENT}) is None
    tracing.record("queue wait", 0)
    tracing.flush()


def test_the_standard_switches_turn_it_off_even_with_an_endpoint() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert not Tracing.from_env({**endpoint, "OTEL_SDK_DISABLED": "true"}).enabled
    assert not Tracing.from_env({**endpoint, "OTEL_TRACES_EXPORTER": "none"}).enabled


def test_with_an_endpoint_tracing_is_on() -> None:
    tracing = Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    try:
        assert tracing.enabled
    finally:
        tracing.shutdown()


@pytest.fixture
def recorded() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider), exporter


def test_a_stored_traceparent_parents_a_span_and_a_malformed_one_starts_a_trace(
        recorded: tuple[Tracing, InMemorySpanExporter]) -> None:
    tracing, exporter = recorded
    with tracing.span("run", parent=TRACEPARENT):
        stored = tracing.traceparent()
    assert stored is not None and stored.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert tracing.extract({"traceparent": "00-zz-yy-01"}) is None
    with tracing.span("run", parent="not a traceparent"):
        pass
    first, second = exporter.get_finished_spans()
    assert first.parent is not None and f"{first.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert second.parent is None


def test_an_error_says_its_type_only_and_control_flow_is_no_error(
        recorded: tuple[Tracing, InMemorySpanExporter]) -> None:
    tracing, exporter = recorded

    class Parked(BaseException):
        pass

    with pytest.raises(ValueError), tracing.span("step"):
        raise ValueError("customer 42's card number")
    with pytest.raises(Parked), tracing.span("run"):
        raise Parked()
    failed, parked = exporter.get_finished_spans()
    assert failed.status.status_code is StatusCode.ERROR and failed.status.description == "ValueError"
    assert not failed.events  # no exception event, which would carry the message
    assert parked.status.status_code is StatusCode.UNSET


def test_a_span_records_what_the_sdk_would_and_ends_once(recorded: tuple[Tracing, InMemorySpanExporter]) -> None:
    tracing, exporter = recorded
    with tracing.span("request", kind=SpanKind.SERVER, attributes={"url.path": "/v1/jobs"}) as outer:
        assert outer is not None and outer.is_recording()
        with tracing.span("submit"):
            tracing.annotate({"tasks_backend.job.id": "j1"})
            tracing.link(TRACEPARENT)
            inner = tracing.traceparent()
        tracing.annotate({"http.response.status_code": 202})
    outer.end()  # a second end changes nothing and exports nothing more
    outer.set_attribute("late", 1)
    submit, request = exporter.get_finished_spans()
    assert request.kind is SpanKind.SERVER and request.parent is None and request.instrumentation_scope is not None
    assert dict(request.attributes or {}) == {"url.path": "/v1/jobs", "http.response.status_code": 202}
    assert request.resource.attributes.get("telemetry.sdk.name") == "opentelemetry"
    assert submit.parent is not None and submit.parent.span_id == request.context.span_id
    assert submit.context.trace_id == request.context.trace_id and submit.context.trace_flags.sampled
    assert dict(submit.attributes or {}) == {"tasks_backend.job.id": "j1"}
    assert [f"{link.context.span_id:016x}" for link in submit.links] == ["00f067aa0ba902b7"]
    assert inner == f"00-{submit.context.trace_id:032x}-{submit.context.span_id:016x}-01"
    assert submit.start_time is not None and submit.end_time is not None and submit.start_time <= submit.end_time


def test_the_sampler_decides_and_an_unsampled_span_is_never_exported() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    with tracing.span("request") as span:
        assert span is not None and not span.is_recording()
        stored = tracing.traceparent()
    tracing.record("queue wait", 0)
    assert stored is not None and stored.endswith("-00")  # the next process knows it was not sampled
    assert exporter.get_finished_spans() == ()
