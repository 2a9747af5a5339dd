"""The tracing switch: off without the endpoint variable (no-op, nothing made), and what a span records."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

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
