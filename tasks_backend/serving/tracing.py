"""Traces: OpenTelemetry spans over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, nothing at all when not.

A `Tracing` is made once per process part by the factories (`from_env`), never at import: with the variable
unset it is `off`, no SDK is loaded and every call returns at once. The standard `OTEL_*` variables
(`OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`...) are read by the SDK itself. A job carries its
submit's context as a W3C `traceparent` string (the job hash's `trace` field), so the worker's spans join the
trace the request started. Attributes name the job, its operation and its owner: never params, results,
answers or secrets (an error says only its type).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .spans import SpanMaker

__all__ = ["JOB_ID", "OPERATION", "OWNER", "SpanKind", "Tracing", "job_attributes", "ms_to_ns"]

#: Any of these set (non-empty): spans are exported there; none: tracing is off.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
DEFAULT_SERVICE_NAME = "tasks-backend"
#: The attributes every job span carries.
JOB_ID, OPERATION, OWNER = "tasks_backend.job.id", "tasks_backend.job.operation", "tasks_backend.job.owner"
_PROPAGATOR = TraceContextTextMapPropagator()
_OFF: contextlib.nullcontext[None] = contextlib.nullcontext(None)


def job_attributes(job_id: str | None = None, operation: str | None = None,
                   owner: str | None = None) -> dict[str, str]:
    """The job's attributes, those known so far."""
    pairs = ((JOB_ID, job_id), (OPERATION, operation), (OWNER, owner))
    return {name: value for name, value in pairs if value}


class Tracing:
    """A process part's tracer: the SDK's, exporting in batches, or none (`enabled` False)."""

    def __init__(self, provider: Any = None) -> None:
        self.provider = provider
        self.tracer: trace.Tracer = provider.get_tracer("tasks_backend") if provider else trace.NoOpTracer()
        #: What starts spans; None: tracing is off.
        self._spans = SpanMaker(self.tracer, "tasks_backend") if provider else None
        self.enabled = self._spans is not None

    @classmethod
    def off(cls) -> Tracing:
        return cls()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Tracing:
        """On, exporting over OTLP/HTTP, when the standard endpoint variable is set in `environ` (the process's
        by default); off otherwise. The SDK reads the other `OTEL_*` variables, and the endpoint, from the process."""
        env = os.environ if environ is None else environ
        if not any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES):
            return cls.off()
        # The standard switches off, which an operator may set without unsetting the endpoint.
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or env.get("OTEL_TRACES_EXPORTER") == "none":
            return cls.off()
        # Imported here: a process that traces nothing never loads the SDK.
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from tasks_backend.serving.otlp import OTLPSpanExporter  # the SDK's, with a cheaper encoder

        # OTEL_SERVICE_NAME, when set, names the service (the SDK reads it); ours otherwise.
        named = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": DEFAULT_SERVICE_NAME}
        provider = TracerProvider(resource=Resource.create(named))  # the sampler: OTEL_TRACES_SAMPLER
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider)

    # -- context ---------------------------------------------------------------------
    def extract(self, carrier: Mapping[str, str]) -> Context | None:
        """The remote parent a `traceparent` (and `tracestate`) in `carrier` names; None: none or malformed."""
        if not self.enabled or not carrier.get("traceparent"):
            return None
        context = _PROPAGATOR.extract(carrier)
        return context if trace.get_current_span(context).get_span_context().is_valid else None

    def traceparent(self) -> str | None:
        """The current span as a `traceparent` (what a job stores for its worker); None when off or outside one."""
        if not self.enabled:
            return None
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        # W3C version 00, written out: the propagator's inject builds a carrier and walks the context for this.
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"

    def _parent(self, parent: Context | str | None) -> Context | None:
        if isinstance(parent, str):
            return self.extract({"traceparent": parent})
        return parent

    # -- spans -----------------------------------------------------------------------
    def span(self, name: str, *, parent: Context | str | None = None, kind: SpanKind = SpanKind.INTERNAL,
             attributes: Mapping[str, Any] | None = None,
             start_ns: int | None = None) -> contextlib.AbstractContextManager[Span | None]:
        """A span around a block, current inside it: under `parent` (a context or a stored `traceparent`), or
        under the current span. An `Exception` leaving the block marks it failed with the exception's type only;
        the jobs' control flow (parking, handing back: `BaseException`s) does not."""
        spans = self._spans
        if spans is None:
            return _OFF
        return _Current(spans.start(name, self._parent(parent), kind, attributes, start_ns))

    def record(self, name: str, start_ns: int, *, parent: Context | str | None = None,
               attributes: Mapping[str, Any] | None = None, end_ns: int | None = None) -> None:
        """A span that already happened (a wait), from `start_ns` to `end_ns` (now by default)."""
        spans = self._spans
        if spans is None:
            return
        span = spans.start(name, self._parent(parent), SpanKind.INTERNAL, attributes, start_ns)
        span.end(end_time=end_ns if end_ns is not None else time.time_ns())

    def annotate(self, attributes: Mapping[str, Any]) -> None:
        """Add attributes to the current span (one learnt inside it: the job id a submit made)."""
        if self.enabled:
            trace.get_current_span().set_attributes(attributes)

    def link(self, traceparent: str | None) -> None:
        """Link the current span to a stored context (an answer to the job it answers, in another trace)."""
        if self.enabled and traceparent:
            context = self.extract({"traceparent": traceparent})
            if context is not None:
                trace.get_current_span().add_link(trace.get_current_span(context).get_span_context())

    def failed(self, reason: str) -> None:
        """Mark the current span failed, saying `reason` (a status, an error's type: nothing of the data)."""
        if self.enabled:
            trace.get_current_span().set_status(Status(StatusCode.ERROR, reason))

    # -- export ----------------------------------------------------------------------
    def flush(self, timeout_ms: int = 5000) -> None:
        """Send what is batched now (a process about to stop, a test)."""
        if self.provider is not None:
            self.provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


class _Current:
    """A started span, current while the block runs and ended after it: what the SDK's `start_as_current_span`
    does, without its two generator-based managers (about 20 us of a traced submit, measured)."""

    __slots__ = ("span", "token")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.token: object = None

    def __enter__(self) -> Span:
        self.token = context_api.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        context_api.detach(self.token)  # type: ignore[arg-type]
        if kind is not None and issubclass(kind, Exception):
            self.span.set_status(Status(StatusCode.ERROR, kind.__name__))
        self.span.end()


def ms_to_ns(ms: int) -> int:
    return ms * 1_000_000
