"""Jobs: the `job` decorator and the registry built from the modules that configuration names.

The decorator only marks a function; nothing is registered at import time. `Registry.from_modules`
imports the named modules and collects the marked functions, so the web app and the workers build the
same registry from the same setting, and two registries can coexist in one process (tests).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from marshmallow import Schema, ValidationError, fields, validate

from ..errors import InvalidParams, UnknownOperation

_MARK = "__tasks_backend_job__"


class _NoParams(Schema):
    pass


@dataclass(frozen=True)
class Concurrency:
    """At most `max` jobs of the operation run at once per value of the parameter `key` (None: for the whole
    operation); the others wait queued, holding no worker slot, and start as one ends."""

    max: int
    key: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max, bool) or not isinstance(self.max, int) or self.max < 1:
            raise ValueError("Concurrency(max=...) must be a positive integer")


@dataclass(frozen=True)
class JobSpec:
    name: str
    fn: Callable[..., Any]
    params: type[Schema]
    ttl_s: float | None
    poll_interval_s: float | None
    description: str
    retry_on: tuple[type[BaseException], ...] = ()
    max_retries: int = 3
    retry_backoff_s: float = 1.0
    concurrency: Concurrency | None = None
    _schema: Schema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        schema = self.params()
        _strict_integers(schema)
        object.__setattr__(self, "_schema", schema)

    def load_params(self, raw: Any) -> dict[str, Any]:
        """Validate and deserialize params; errors name the offending fields."""
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise InvalidParams("`params` must be a JSON object.")
        try:
            loaded = self._schema.load(_whole_floats_as_ints(self._schema, raw))
        except ValidationError as exc:
            raise InvalidParams("The parameters do not match the operation's schema.",
                                extra={"errors": exc.normalized_messages()}) from exc  # type: ignore[no-untyped-call]
        return dict(loaded)

    def dump_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Loaded params back to JSON-safe values (for storage)."""
        return dict(self._schema.dump(params))


class Operation(Protocol):
    """What a submit needs of an operation: a `JobSpec`, or one a worker published (`catalog`)."""

    @property
    def ttl_s(self) -> float | None: ...

    @property
    def poll_interval_s(self) -> float | None: ...

    def load_params(self, raw: Any) -> dict[str, Any]: ...

    def dump_params(self, params: dict[str, Any]) -> dict[str, Any]: ...


class Operations(Protocol):
    """Where a submit looks an operation up: a `Registry`, or the operations the workers published."""

    def get(self, name: str) -> Operation: ...


def _strict_integers(schema: Schema) -> None:
    """Integer fields refuse 2.5 and "5" instead of truncating or coercing them, as their published
    JSON Schema (`"type": "integer"`) says; 2.0 is an integer there (and A2A's protobuf numbers are all
    doubles), so `_whole_floats_as_ints` turns it into 2 first."""
    for item in schema.fields.values():
        if isinstance(item, fields.Integer):
            item.strict = True
        elif isinstance(item, fields.Nested) and isinstance(item.schema, Schema):
            _strict_integers(item.schema)


def _exclusive_bounds(schema: Schema, published: dict[str, Any]) -> dict[str, Any]:
    """apispec publishes `Range(min=0, min_inclusive=False)` as `minimum: 0`, which lets 0 through on
    paper; JSON Schema says it with `exclusiveMinimum` (and `exclusiveMaximum`)."""
    properties = published.get("properties") or {}
    for name, item in schema.fields.items():
        prop = properties.get(item.data_key or name)
        for rule in item.validators:
            if not isinstance(rule, validate.Range) or not isinstance(prop, dict):
                continue
            if rule.min is not None and not rule.min_inclusive:
                prop.pop("minimum", None)
                prop["exclusiveMinimum"] = rule.min
            if rule.max is not None and not rule.max_inclusive:
                prop.pop("maximum", None)
                prop["exclusiveMaximum"] = rule.max
    return published


def _whole_floats_as_ints(schema: Schema, raw: dict[str, Any]) -> dict[str, Any]:
    out = raw
    for name, item in schema.fields.items():
        key = item.data_key or name
        value = raw.get(key)
        if isinstance(item, fields.Integer) and isinstance(value, float) and value.is_integer():
            fixed: Any = int(value)
        elif isinstance(item, fields.Nested) and isinstance(item.schema, Schema) and isinstance(value, dict):
            fixed = _whole_floats_as_ints(item.schema, value)
        else:
            continue
        if fixed is not value:
            out = {**out, key: fixed}
    return out


def job(name: str, *, params: type[Schema] | None = None, ttl: float | None = None,
        poll_interval: float | None = None, description: str = "",
        retry_on: Iterable[type[BaseException]] = (), max_retries: int = 3,
        retry_backoff: float = 1.0,
        concurrency: Concurrency | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark `fn(ctx, **params)` as the job `name`.

    `ttl` and `poll_interval` are seconds. `retry_on` lists exception types that mean "try again
    later": the job is requeued with exponential backoff from `retry_backoff`, at most `max_retries`
    times, replaying recorded steps. `concurrency` caps how many run at once (see `Concurrency`).
    """

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        spec = JobSpec(name=name, fn=fn, params=params or _NoParams, ttl_s=ttl, poll_interval_s=poll_interval,
                       # Every protocol publishes a description (MCP clients and the A2A card require one).
                       description=description or (fn.__doc__ or "").strip().split("\n")[0] or f"Runs {name}.",
                       retry_on=tuple(retry_on), max_retries=max_retries, retry_backoff_s=retry_backoff,
                       concurrency=concurrency)
        setattr(fn, _MARK, spec)
        return fn

    return mark


def _json_schema_converter() -> MarshmallowPlugin:
    plugin = MarshmallowPlugin()
    APISpec(title="tasks-backend", version="1", openapi_version="3.1.0", plugins=[plugin])
    return plugin


class Registry:
    def __init__(self, specs: Iterable[JobSpec] = ()) -> None:
        self._specs: dict[str, JobSpec] = {}
        for spec in specs:
            self.add(spec)
        self._plugin = _json_schema_converter()
        self._schemas: dict[str, dict[str, Any]] = {}

    def add(self, spec: JobSpec) -> None:
        existing = self._specs.get(spec.name)
        if existing is not None and existing.fn is not spec.fn:
            raise ValueError(f"job {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> Registry:
        specs: list[JobSpec] = []
        for module_name in modules:
            module = _import_jobs(module_name)
            specs.extend(getattr(obj, _MARK) for obj in vars(module).values() if hasattr(obj, _MARK))
        return cls(specs)

    def get(self, name: str) -> JobSpec:
        spec = self._specs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise UnknownOperation(extra={"operations": sorted(self._specs)})
        return spec

    def __iter__(self) -> Any:
        return iter(sorted(self._specs.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._specs)

    def form_schema(self, schema: dict[str, Any] | type[Schema] | Schema | None) -> dict[str, Any]:
        """A JSON Schema for an input request, from a dict or a marshmallow schema."""
        if schema is None:
            return {"type": "object", "properties": {}}
        if isinstance(schema, dict):
            return schema
        assert self._plugin.converter is not None
        return dict(self._plugin.converter.schema2jsonschema(schema))  # type: ignore[no-untyped-call]

    def json_schema(self, name: str) -> dict[str, Any]:
        """The JSON Schema of an operation's params, as published by every protocol."""
        if name not in self._schemas:
            assert self._plugin.converter is not None
            schema = dict(self._plugin.converter.schema2jsonschema(self.get(name).params))  # type: ignore[no-untyped-call]
            self._schemas[name] = _exclusive_bounds(self.get(name).params(), schema)
        return self._schemas[name]


class JobModuleNotFound(ImportError):
    """A module named in `TASKS_BACKEND_JOBS` cannot be imported; the message says how to fix that."""


def _import_jobs(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise JobModuleNotFound(
                f"TASKS_BACKEND_JOBS names {module_name!r}, which cannot be imported ({exc}). Name modules as "
                "Python imports them, comma-separated, with their folder on PYTHONPATH; the setting replaces "
                "the demo jobs, so add tasks_backend.demo to keep them.", name=module_name) from exc
        raise JobModuleNotFound(f"Importing the job module {module_name!r} failed: {exc}. Install what it "
                                "imports in the environment that runs tasks-backend.", name=missing) from exc
