"""JSON values checked against JSON Schemas (Draft 2020-12) with the `jsonschema` library.

Answers are checked against exactly the schema a job asked with, and params of operations known only by their
published schema (see `catalog`) against that schema: whatever a schema says (a nullable `"type": ["string",
"null"]`, `anyOf`, bounds) is judged as JSON Schema judges it. `format` is an annotation, as Draft 2020-12 has it
by default. Messages name the property they are about first (`"name: problem"`), so that a form can put each
beside its field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError


def _kinds(expected: Any) -> str:
    return " or ".join(map(str, expected)) if isinstance(expected, list) else str(expected)


def _words(error: ValidationError) -> str:
    """The problem in a few words; the value itself is not repeated (it may be long)."""
    rule, expected = error.validator, error.validator_value
    if rule == "type":
        return f"must be {_kinds(expected)}"
    if rule == "enum":
        return f"must be one of {expected}"
    if rule == "const":
        return f"must be {expected!r}"
    if rule in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        words = {"minimum": "at least", "exclusiveMinimum": "more than", "maximum": "at most",
                 "exclusiveMaximum": "less than"}[str(rule)]
        return f"must be {words} {expected}"
    if rule == "minLength":
        return f"must be at least {expected} characters"
    if rule == "maxLength":
        return f"must be at most {expected} characters"
    if rule == "pattern":
        return f"must match {expected}"
    if rule in ("anyOf", "oneOf"):
        return "matches none of the allowed forms"
    return str(error.message)


def _messages(error: ValidationError) -> Iterable[tuple[str, str]]:
    """(property path, problem) of one error; a missing required property is named by itself."""
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        for name in error.validator_value:
            if name not in error.instance:
                yield (f"{path}.{name}" if path else str(name)), "required"
        return
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set((error.schema.get("properties") or {}) if isinstance(error.schema, dict) else ())
        for name in error.instance:
            if name not in known:
                yield (f"{path}.{name}" if path else str(name)), "not asked for"
        return
    yield path, _words(error)


def problems(schema: dict[str, Any], value: Any) -> list[tuple[str, str]]:
    """(property path, problem) for each way `value` fails `schema`, in a stable order; [] when it passes.

    A schema that is not valid JSON Schema is a problem of its own (the path is empty): the caller cannot fix
    it, but it is no reason for a 500 either."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [("", f"the requested schema is not valid JSON Schema ({exc.message})")]
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    return [item for error in errors for item in _messages(error)]


def answer_problems(schema: dict[str, Any], content: Any) -> list[str]:
    """An answer's problems as `"name: problem"` lines (a problem of the whole answer has no name)."""
    return [f"{path}: {words}" if path else words for path, words in problems(schema, content)]


def params_problems(schema: dict[str, Any], params: Any) -> dict[str, list[str]]:
    """Params' problems by field, in the shape marshmallow gives them (`_schema` for the whole object)."""
    out: dict[str, list[str]] = {}
    for path, words in problems(schema, params):
        out.setdefault(path or "_schema", []).append(words)
    return out
