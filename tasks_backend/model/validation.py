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


#: How each failed keyword reads, filled in with the keyword's value (a `type`'s kinds joined with "or").
_WORDS = {
    "type": "must be {}", "enum": "must be one of {}", "const": "must be {!r}",
    "minimum": "must be at least {}", "exclusiveMinimum": "must be more than {}",
    "maximum": "must be at most {}", "exclusiveMaximum": "must be less than {}",
    "minLength": "must be at least {} characters", "maxLength": "must be at most {} characters",
    "pattern": "must match {}",
    "anyOf": "matches none of the allowed forms", "oneOf": "matches none of the allowed forms",
}


def _words(error: ValidationError) -> str:
    """The problem in a few words; the value itself is not repeated (it may be long)."""
    rule, expected = str(error.validator), error.validator_value
    if rule not in _WORDS:
        return str(error.message)
    return _WORDS[rule].format(_kinds(expected) if rule == "type" else expected)


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
