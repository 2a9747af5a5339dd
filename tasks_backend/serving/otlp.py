"""OTLP/HTTP trace export with the request's protobuf bytes written directly, not through message objects.

The SDK's encoder builds a protobuf object per span, attribute and value: on 4,000 spans shaped like ours (a SERVER
span with 4 attributes, an INTERNAL one with 5), about 30 us of CPU a span, the largest part of what tracing adds to
a submit. `encode_spans` writes the same `ExportTraceServiceRequest` (grouped by resource and scope, each field as
the SDK's encoder sets it) into a bytearray: about 9 us a span on the same spans, 3 of them reading the span through
the SDK's properties. `OTLPSpanExporter` is the SDK's exporter (endpoint, headers, timeout, compression, retries,
metrics) sending these bytes; a batch holding anything `encode_spans` cannot write takes the SDK's encoder instead.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as _SDKSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

__all__ = ["OTLPSpanExporter", "Unencodable", "encode_spans"]

_Q = struct.Struct("<Q").pack  # fixed64: times
_D = struct.Struct("<d").pack  # double
_I = struct.Struct("<I").pack  # fixed32: flags
_INT64 = 1 << 63
_UINT64 = 1 << 64
_UINT32 = 1 << 32
#: The kind field: proto's numbers are the API's plus one (0 is UNSPECIFIED).
_KIND = {kind: b"\x30%c" % (kind.value + 1) for kind in SpanKind}
#: The status field, but for a description: the code, as proto numbers them (the API's numbers).
_STATUS = {code: b"\x18%c" % code.value if code.value else b"" for code in StatusCode}
#: SpanFlags: whether the parent's (a link's) context is remote is known (always), and that it is.
_LOCAL, _REMOTE = _I(0x100), _I(0x300)
_LOCAL_FLAGS, _REMOTE_FLAGS = b"\x85\x01" + _LOCAL, b"\x85\x01" + _REMOTE  # a span's: field 16, fixed32
_KEY_CACHE_SIZE = 1024


class Unencodable(ValueError):
    """A value `encode_spans` does not know how to write (the SDK's encoder then writes the batch)."""


def _varint_slow(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint_slow(n) for n in range(1 << 12)]  # lengths and counts: nearly always below 4096


def _varint(value: int) -> bytes:
    if value < 4096:
        if value < 0:
            raise Unencodable(f"negative varint {value}")
        return _SMALL[value]
    return _varint_slow(value)


def _uint32(value: int) -> bytes:
    if not 0 <= value < _UINT32:
        raise Unencodable(f"uint32 out of range: {value}")
    return _varint(value)


def _string(tag: bytes, text: str) -> bytes:
    data = text.encode()
    return tag + _varint(len(data)) + data


def _message(tag: bytes, body: bytes | bytearray) -> bytes:
    return tag + _varint(len(body)) + body


def _int64(value: int) -> bytes:
    if not -_INT64 <= value < _INT64:
        raise Unencodable(f"int64 out of range: {value}")
    return b"\x18" + _varint(value % _UINT64)


def _value(value: Any) -> bytes:
    """An AnyValue's body: its one field (written even when zero or empty, as a oneof member is)."""
    kind = type(value)
    if kind is str:
        return _string(b"\x0a", value)
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        return _int64(value)
    if kind is float:
        return b"\x21" + _D(value)
    if value is None:
        return b""
    # Subclasses and containers, tried in the order the SDK's encoder tries them (bool has no subclasses).
    if isinstance(value, str):
        return _string(b"\x0a", value)
    if isinstance(value, int):
        return _int64(value)
    if isinstance(value, float):
        return b"\x21" + _D(value)
    if isinstance(value, bytes):
        return _message(b"\x3a", value)
    if isinstance(value, Sequence):
        return _message(b"\x2a", b"".join([_message(b"\x0a", _value(item)) for item in value]))
    if isinstance(value, Mapping):
        pairs = b"".join([_message(b"\x0a", _key_value(str(key), item)) for key, item in value.items()])
        return _message(b"\x32", pairs)
    raise Unencodable(f"attribute value of type {type(value).__name__}")


_keys: dict[str, bytes] = {}


def _key(key: str) -> bytes:
    """A KeyValue's key field, cached: a service's attribute names are few."""
    encoded = _keys.get(key)
    if encoded is None:
        if type(key) is not str:
            raise Unencodable(f"attribute key of type {type(key).__name__}")
        encoded = _string(b"\x0a", key) if key else b""
        if len(_keys) >= _KEY_CACHE_SIZE:
            _keys.clear()
        _keys[key] = encoded
    return encoded


def _key_value(key: str, value: Any) -> bytes:
    return _key(key) + _message(b"\x12", _value(value))


def _attributes(out: bytearray, tag: bytes, attributes: Any) -> None:
    """KeyValues, each under `tag`. A short string value (most of ours) is written in one step: every length in
    it then takes one byte."""
    if not attributes:
        return
    try:
        # A span's attributes are a read-only view of the SDK's mapping, whose `items()` reads every value
        # through two Python methods; its `copy()` is one call that returns a dict.
        pairs = attributes.copy().items()
    except AttributeError:  # a mapping without `copy()`
        pairs = attributes.items()
    keys = _keys
    for key, value in pairs:
        field = keys.get(key)
        if field is None:
            field = _key(key)
        if type(value) is str:
            data = value.encode()
            size = len(field) + len(data) + 4
            if size < 0x80:
                out += b"%b%c%b\x12%c\x0a%c%b" % (tag, size, field, len(data) + 2, len(data), data)
                continue
            any_value = _string(b"\x0a", value)
        else:
            any_value = _value(value)
        pair = field + b"\x12" + _varint(len(any_value)) + any_value
        out += tag
        out += _varint(len(pair))
        out += pair


def _trace_state(out: bytearray, tag: bytes, trace_state: Any) -> None:
    if trace_state:
        text = ",".join([f"{key}={value}" for key, value in trace_state.items()])
        if text:
            out += _string(tag, text)


def _span(span: ReadableSpan) -> bytearray:
    """A Span's body, fields in number order, each as the SDK's encoder sets it (zero and empty ones left out)."""
    context, parent = span.get_span_context(), span.parent
    if context is None:
        raise Unencodable("a span without a context")
    out = bytearray(b"\x0a\x10%b\x12\x08%b" % (context.trace_id.to_bytes(16, "big"),
                                                context.span_id.to_bytes(8, "big")))
    _trace_state(out, b"\x1a", context.trace_state)
    if parent is not None:
        out += b"\x22\x08%b" % parent.span_id.to_bytes(8, "big")
    if name := span.name:
        data = name.encode()
        out += b"\x2a%c%b" % (len(data), data) if len(data) < 0x80 else _string(b"\x2a", name)
    out += _KIND[span.kind]
    if start := span.start_time:
        out += b"\x39%b" % _Q(start)
    if end := span.end_time:
        out += b"\x41%b" % _Q(end)
    _attributes(out, b"\x4a", span.attributes)
    if dropped := span.dropped_attributes:
        out += b"\x50%b" % _uint32(dropped)
    for event in span.events:
        out += _message(b"\x5a", _event(event))
    if dropped := span.dropped_events:
        out += b"\x60%b" % _uint32(dropped)
    for link in span.links:
        out += _message(b"\x6a", _link(link))
    if dropped := span.dropped_links:
        out += b"\x70%b" % _uint32(dropped)
    status = span.status
    if status is not None:
        code = _STATUS[status.status_code]
        if status.description:
            out += _message(b"\x7a", _string(b"\x12", status.description) + code)
        else:
            out += b"\x7a%c%b" % (len(code), code)
    out += _REMOTE_FLAGS if parent is not None and parent.is_remote else _LOCAL_FLAGS
    return out


def _event(event: Any) -> bytearray:
    out = bytearray()
    if event.timestamp:
        out += b"\x09%b" % _Q(event.timestamp)
    if event.name:
        out += _string(b"\x12", event.name)
    _attributes(out, b"\x1a", event.attributes)
    if dropped := event.dropped_attributes:
        out += b"\x20"
        out += _uint32(dropped)
    return out


def _link(link: Any) -> bytearray:
    """A Link's body: the SDK's encoder leaves its trace_state out, so does this (a parsed-back message is equal)."""
    context = link.context
    out = bytearray(b"\x0a\x10")
    out += context.trace_id.to_bytes(16, "big")
    out += b"\x12\x08"
    out += context.span_id.to_bytes(8, "big")
    _attributes(out, b"\x22", link.attributes)
    if dropped := link.dropped_attributes:
        out += b"\x28"
        out += _uint32(dropped)
    out += b"\x35%b" % (_REMOTE if context.is_remote else _LOCAL)
    return out


def _scope_spans(scope: Any, spans: list[bytearray]) -> bytearray:
    body = bytearray()
    if scope is not None:
        if scope.name:
            body += _string(b"\x0a", scope.name)
        if scope.version:
            body += _string(b"\x12", scope.version)
        _attributes(body, b"\x1a", scope.attributes)
    out = bytearray(_message(b"\x0a", body))  # present even when empty, as the SDK's encoder sets it
    for span in spans:
        out += b"\x12"
        out += _varint(len(span))
        out += span
    if scope is not None and scope.schema_url:
        out += _string(b"\x1a", scope.schema_url)
    return out


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialised `ExportTraceServiceRequest` for `spans`, equal once parsed to what the SDK's encoder makes:
    one ResourceSpans per distinct resource and in it one ScopeSpans per distinct scope, in order of first
    appearance. Raises `Unencodable` (or the error of a value that cannot be written) for anything else."""
    # Grouped as the SDK's encoder groups them (dicts keyed by equal resources and scopes), hashing each distinct
    # object once: a Resource hashes by dumping its attributes to JSON.
    resources: dict[Any, dict[Any, list[bytearray]]] = {}
    by_identity: dict[tuple[int, int], list[bytearray]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        group = by_identity.get((id(resource), id(scope)))
        if group is None:
            group = resources.setdefault(resource, {}).setdefault(scope, [])
            by_identity[id(resource), id(scope)] = group
        group.append(_span(span))
    out = bytearray()
    for resource, scopes in resources.items():
        body = bytearray()
        _attributes(body, b"\x0a", resource.attributes)
        resource_spans = bytearray(_message(b"\x0a", body))
        for scope, encoded in scopes.items():
            resource_spans += _message(b"\x12", _scope_spans(scope, encoded))
        if resource.schema_url:
            resource_spans += _string(b"\x1a", resource.schema_url)
        out += _message(b"\x0a", resource_spans)
    return bytes(out)


class OTLPSpanExporter(_SDKSpanExporter):
    """The SDK's OTLP/HTTP span exporter, sending what `encode_spans` writes through its own client (endpoint,
    headers, timeout, compression and retries as the SDK resolves them). A batch `encode_spans` cannot write, a
    shut-down exporter, an oversized request or an SDK without that client: the SDK's own `export`."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        # The exporter's own parts its `export` uses (its HTTP client: sending, compression, retries; its
        # metrics), looked up: an SDK release without them exports as the SDK does, never loses a batch.
        client, metrics = getattr(self, "_client", None), getattr(self, "_metrics", None)
        if client is None or metrics is None or getattr(self, "_shutdown", True):
            return super().export(spans)
        try:
            data = encode_spans(spans)
        except Exception:  # anything ours cannot write: the SDK's encoder writes (or drops) it as it would
            return super().export(spans)
        limit = getattr(self, "_max_request_size", 0)
        if 0 < limit < len(data):  # the SDK's export drops it, saying so
            return super().export(spans)
        with metrics.export_operation(len(spans)) as result:
            sent = client.export(data)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {"http.response.status_code": sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
