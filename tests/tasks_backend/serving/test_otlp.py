"""Our OTLP trace encoder against the SDK's: spans made by the real SDK (several resources and scopes, every
attribute type, events, links, statuses, kinds, dropped counts) written by both, ours parsed back with
`opentelemetry-proto` and equal to the SDK's message (and byte for byte: both write fields in number order).
The exporter sends ours to a real OTLP/HTTP receiver, and a batch ours cannot write goes the SDK's way."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from http import HTTPStatus
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode_spans
from opentelemetry.exporter.otlp.proto.http import trace_exporter as sdk_exporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from tasks_backend.devtools.receivers import OtlpReceiver
from tasks_backend.serving.otlp import OTLPSpanExporter, Unencodable, encode_spans
from tests.conftest import wait_until


class Outcome(StrEnum):
    CREATED = "created"


class Meters(float):
    pass


class Plain(Mapping[str, Any]):
    """A mapping with nothing but the abstract methods (no `copy`)."""

    def __init__(self, items: dict[str, Any]) -> None:
        self.items_ = items

    def __getitem__(self, key: str) -> Any:
        return self.items_[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.items_)

    def __len__(self) -> int:
        return len(self.items_)


LONG = "ü" * 3000  # lengths past one and two varint bytes
VALUES: dict[str, Any] = {
    "str": "submit", "unicode": "žluťoučký kůň 🐎 日本", "empty": "", "long": LONG,
    "true": True, "false": False, "zero": 0, "one": 1, "negative": -1, "int64.max": 2**63 - 1,
    "int64.min": -(2**63), "large": 10**15, "float": 1.5, "float.zero": 0.0, "float.negative": -0.0,
    "float.tiny": 5e-324, "float.huge": 1e308, "float.inf": math.inf,
    "strs": ("a", "", "é"), "ints": (1, -2, 2**62), "floats": (0.5, -1.25), "bools": (True, False),
    "empty.seq": (), "with.none": ("a", None), "bytes": b"\x00\xffid", "mapping": {"k": "v", "n": 3},
    "long.seq": tuple(range(300)), "int.enum": HTTPStatus.ACCEPTED, "str.enum": Outcome.CREATED,
    "float.subclass": Meters(2.5),
}
REMOTE = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=True,
                     trace_flags=TraceFlags(1), trace_state=TraceState([("vendor", "v1"), ("other", "x=y")]))


class Collected:
    """Real SDK providers feeding one in-memory exporter, so their spans interleave in one batch."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()

    def provider(self, resource: Resource, limits: SpanLimits | None = None) -> TracerProvider:
        provider = TracerProvider(resource=resource, span_limits=limits)
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        return provider

    def spans(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()


def assert_same(spans: Sequence[ReadableSpan], *, nan: bool = False) -> bytes:
    """Ours parses back to the SDK's message, and is the SDK's bytes."""
    ours, theirs = encode_spans(spans), sdk_encode_spans(spans)
    if not nan:  # NaN is unequal to itself, so two messages holding it are too
        assert ExportTraceServiceRequest.FromString(ours) == theirs
    assert ours == theirs.SerializePartialToString()
    return ours


def every_feature() -> Sequence[ReadableSpan]:
    collected = Collected()
    service = collected.provider(Resource.create({"service.name": "svc", "host.count": 3}))
    # Distinct resource objects that are equal: one group, as the SDK's encoder makes it.
    twin = collected.provider(Resource.create({"service.name": "svc", "host.count": 3}))
    other = collected.provider(Resource({"service.name": "ünïcode", "list": ("a", "b")}, schema_url="https://r/1"),
                               SpanLimits(max_span_attributes=3, max_events=1, max_links=1,
                                          max_event_attributes=1, max_link_attributes=1))
    bare = collected.provider(Resource({}))
    scoped = service.get_tracer("tasks_backend", "1.2.3", schema_url="https://s/1",
                                attributes={"scope.attr": "x", "scope.n": 7})
    plain = service.get_tracer("plain")
    unnamed = bare.get_tracer("")
    linked = SpanContext(0x1, 0x2, is_remote=False, trace_state=TraceState([("k", "v")]))

    with scoped.start_as_current_span("POST /v1/jobs", kind=SpanKind.SERVER, attributes=VALUES) as server:
        server.add_event("started", {"at": 1, "who": "ü"})
        server.add_event("bare")
        with plain.start_as_current_span("submit", attributes={"tasks_backend.job.id": "j1"}) as inner:
            inner.set_status(Status(StatusCode.ERROR, "Invalid params: ž"))
        server.set_status(Status(StatusCode.OK))
    for kind in SpanKind:
        with twin.get_tracer("plain").start_as_current_span(f"kind {kind.name}", kind=kind):
            pass
        with scoped.start_as_current_span("", kind=kind, context=trace.set_span_in_context(
                trace.NonRecordingSpan(REMOTE)), links=[Link(REMOTE, {"link": True}), Link(linked)]):
            pass
    limited = other.get_tracer("limited", "0")
    with limited.start_as_current_span("dropping", attributes={f"a{i}": i for i in range(5)},
                                       links=[Link(linked), Link(REMOTE, {"x": 1, "y": 2})]) as span:
        span.add_event("two")  # dropped, the oldest: the one kept has dropped an attribute
        span.add_event("one", {"p": 1, "q": 2})
        span.set_status(Status(StatusCode.ERROR))
    with unnamed.start_as_current_span("no scope name", start_time=1, end_on_exit=False) as span:
        span.end(end_time=2**63)
    return collected.spans()


def test_every_feature_is_written_as_the_sdk_writes_it() -> None:
    spans = every_feature()
    assert len({span.resource.attributes.get("service.name") for span in spans}) == 3
    request = ExportTraceServiceRequest.FromString(assert_same(spans))
    # The equal resources make one group, holding two scopes: the twin's tracer is equal to the first's "plain".
    assert len(request.resource_spans) == 3
    assert [len(group.scope_spans) for group in request.resource_spans] == [2, 1, 1]
    assert sum(len(scope.spans) for group in request.resource_spans for scope in group.scope_spans) == len(spans)
    assert_same(list(reversed(spans)))
    assert_same(spans[:1])


def test_nothing_and_one_span_of_each_shape() -> None:
    assert encode_spans([]) == b"" == sdk_encode_spans([]).SerializePartialToString()
    for span in every_feature():
        assert_same([span])


def test_nan_is_written_as_the_sdk_writes_it() -> None:
    collected = Collected()
    with collected.provider(Resource({})).get_tracer("t").start_as_current_span("s", attributes={
            "nan": math.nan, "nans": (math.nan, 1.0)}):
        pass
    assert_same(collected.spans(), nan=True)


def made(attributes: Mapping[str, Any]) -> ReadableSpan:
    """A finished span holding `attributes` as given: the SDK's `ReadableSpan` checks nothing, as a span from
    another source might not."""
    context = SpanContext(0xABC, 0xDEF, is_remote=False)
    return ReadableSpan("made", context, attributes=attributes, resource=Resource({}), start_time=1, end_time=2)


def test_spans_from_elsewhere_and_many_attribute_names() -> None:
    assert_same([made(Plain({"a": 1, "b": "ü"})), made({f"name {i}": i for i in range(1500)})])


@pytest.mark.parametrize("attributes", [{"bad": 2**64}, {"bad": -(2**63) - 1}, {"bad": (1, 2**70)},
                                        {"bad": object()}, {"bad": [object()]}, {1: "key not a string"}])
def test_a_value_ours_cannot_write_is_refused_not_written(attributes: dict[Any, Any]) -> None:
    with pytest.raises(Unencodable):
        encode_spans([made({"fine": "yes"}), made(attributes)])


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


def test_the_exporter_sends_ours_with_the_sdk_settings(receiver: OtlpReceiver,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")  # the receiver takes gzip
    exporter = OTLPSpanExporter()

    def sdk_encoder(spans: Sequence[ReadableSpan]) -> Any:
        raise AssertionError("the SDK's encoder is not used for what ours can write")

    monkeypatch.setattr(sdk_exporter, "encode_spans", sdk_encoder)
    try:
        spans = every_feature()
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        got = receiver.spans()
        assert [span.name for span in got] == [span.name for group in ExportTraceServiceRequest.FromString(
            encode_spans(spans)).resource_spans for scope in group.scope_spans for span in scope.spans]
        server = next(span for span in got if span.name == "POST /v1/jobs")
        assert server.attributes["unicode"] == VALUES["unicode"] and server.attributes["int64.min"] == -(2**63)
        assert server.attributes["strs"] == list(VALUES["strs"]) and server.service == "svc"
    finally:
        exporter.shutdown()
    assert exporter.export(spans) is SpanExportResult.FAILURE  # shut down: nothing sent
    assert receiver.requests == 1


def test_a_refusing_endpoint_is_a_failed_export(receiver: OtlpReceiver) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{receiver.url}/elsewhere", timeout=5)  # 404: not retried
    try:
        assert exporter.export([made({"a": 1})]) is SpanExportResult.FAILURE
    finally:
        exporter.shutdown()


def test_an_oversized_request_is_dropped_as_the_sdk_drops_it(receiver: OtlpReceiver) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces", timeout=5, max_request_size=100)
    try:
        assert exporter.export([made({"a": 1})]) is SpanExportResult.SUCCESS
        assert exporter.export([made({"a": "x" * 100})]) is SpanExportResult.FAILURE
    finally:
        exporter.shutdown()
    assert receiver.requests == 1


def test_a_batch_ours_cannot_write_goes_through_the_sdk_encoder(receiver: OtlpReceiver) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces", timeout=5)
    batch = [made({"fine": "yes"}), made({"bad": 2**64, "kept": "ü"})]
    with pytest.raises(Unencodable):
        encode_spans(batch)
    try:
        assert exporter.export(batch) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    wait_until(lambda: len(receiver.spans()) == 2)
    first, second = receiver.spans()
    assert first.attributes == {"fine": "yes"} and second.attributes["kept"] == "ü"  # the SDK drops what it can't


scalars = (st.text(max_size=40) | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.floats(allow_nan=False) | st.binary(max_size=20))
homogeneous = st.one_of(*(st.lists(element, max_size=6).map(tuple) for element in (
    st.text(max_size=10), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False))))
attribute_dicts = st.dictionaries(st.text(min_size=1, max_size=30), scalars | homogeneous, max_size=12)


@settings(max_examples=150, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(span_attributes=attribute_dicts, event_attributes=attribute_dicts, resource_attributes=attribute_dicts)
def test_any_attributes_the_sdk_keeps_are_written_as_it_writes_them(
        span_attributes: dict[str, Any], event_attributes: dict[str, Any],
        resource_attributes: dict[str, Any]) -> None:
    collected = Collected()
    provider = collected.provider(Resource(resource_attributes))
    with provider.get_tracer("t", attributes=event_attributes).start_as_current_span(
            "s", attributes=span_attributes, links=[Link(REMOTE, event_attributes)]) as span:
        span.add_event("e", event_attributes)
    assert_same(collected.spans())
