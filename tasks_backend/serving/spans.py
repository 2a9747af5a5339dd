"""The spans `Tracing` starts: what the SDK's tracer does for a span, at a third of its cost.

The SDK's span guards every change with a lock and cleans each attribute value through a bounded mapping; with
two spans a traced submit spent about 200 us of CPU on them, more than the submit's own work. A span here is
changed by the one thread that started it and carries attributes this package sets (strings and numbers, a
handful of them), so it keeps them in a plain dict. What it records is what the SDK records: the ids from the
SDK's id generator, the sampler's decision (the standard `OTEL_TRACES_SAMPLER`), the provider's resource, and,
once ended, an SDK `ReadableSpan` handed to the provider's span processors, which batch and export it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

__all__ = ["LiveSpan", "SpanMaker"]

log = logging.getLogger(__name__)
_UNSET = Status(StatusCode.UNSET)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)


class SpanMaker:
    """Starts spans for one SDK tracer (`provider.get_tracer(name)`), with its sampler, ids, resource and
    processors."""

    def __init__(self, tracer: Any, scope: str) -> None:
        self.processor = tracer.span_processor
        self.sampler = tracer.sampler
        self.ids = tracer.id_generator
        self.resource = tracer.resource
        self.scope = InstrumentationScope(scope)

    def start(self, name: str, context: Context | None, kind: SpanKind, attributes: Mapping[str, Any] | None,
              start_ns: int | None) -> trace.Span:
        """A span under the span `context` holds (the current one when None), started at `start_ns` (now)."""
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self.ids.generate_trace_id()
        else:
            trace_id = parent.trace_id
        sampled = self.sampler.should_sample(context, trace_id, name, kind, attributes, ())
        decision = sampled.decision
        flags = _SAMPLED if decision.is_sampled() else _NOT_SAMPLED
        span_context = SpanContext(trace_id, self.ids.generate_span_id(), is_remote=False, trace_flags=flags,
                                   trace_state=sampled.trace_state)
        if not decision.is_recording():
            return NonRecordingSpan(span_context)
        return LiveSpan(self, name, span_context, parent, kind, dict(sampled.attributes),
                        start_ns if start_ns is not None else time.time_ns())


class LiveSpan(trace.Span):
    """A recording span, changed by one thread; ended once (a second `end` is ignored, as the SDK's is)."""

    __slots__ = ("_attributes", "_context", "_end", "_events", "_kind", "_links", "_maker", "_name", "_parent",
                 "_start", "_status")

    def __init__(self, maker: SpanMaker, name: str, context: SpanContext, parent: SpanContext | None,
                 kind: SpanKind, attributes: dict[str, Any], start_ns: int) -> None:
        self._maker, self._name, self._context, self._parent, self._kind = maker, name, context, parent, kind
        self._attributes, self._start = attributes, start_ns
        self._end: int | None = None
        self._links: list[Link] = []
        self._events: list[Event] = []
        self._status = _UNSET

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._end is None:
            self._attributes.update(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        if self._end is None:
            self._attributes[key] = value

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None,
                  timestamp: int | None = None) -> None:
        if self._end is None:
            self._events.append(Event(name, attributes, timestamp))

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        if self._end is None and context is not None and context.is_valid:
            self._links.append(Link(context, attributes))

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # As the SDK's: OK is final, and UNSET never replaces what was set.
        if self._end is not None or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self._status = status

    def record_exception(self, exception: BaseException, attributes: Mapping[str, Any] | None = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        """The exception's type only: a message may carry a caller's data, which spans never hold."""
        self.add_event("exception", {"exception.type": type(exception).__name__}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            log.debug("span %s ended twice", self._name)
            return
        self._end = end_time if end_time is not None else time.time_ns()
        maker = self._maker
        maker.processor.on_end(ReadableSpan(
            name=self._name, context=self._context, parent=self._parent, resource=maker.resource,
            attributes=self._attributes, events=tuple(self._events), links=tuple(self._links), kind=self._kind,
            status=self._status, start_time=self._start, end_time=self._end, instrumentation_scope=maker.scope))

    # The SDK's span has these; code that reads a span it started (tests, a processor) may use them.
    @property
    def name(self) -> str:
        return self._name

    @property
    def attributes(self) -> Mapping[str, Any]:
        return self._attributes

    @property
    def links(self) -> Sequence[Link]:
        return tuple(self._links)

    def __repr__(self) -> str:
        return f"LiveSpan(name={self._name!r}, context={self._context!r})"
