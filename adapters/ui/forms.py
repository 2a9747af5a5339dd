"""Questions a job asks (elicitation `requestedSchema`s) as HTML form fields, and form posts back as answers.

Only translation: whether an answer is acceptable is the service's call (`JobService.provide_input`);
its messages are put back beside the fields they name. The browser gets the schema's constraints as
HTML attributes, so most mistakes are caught before a post, but the server's word is the one that counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from werkzeug.datastructures import MultiDict

#: JSON Schema string formats with an HTML input type of their own.
_STRING_INPUT_TYPES = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}


@dataclass
class FormField:
    """One question of a form, ready for the template."""

    name: str  # the property name in the answer
    input_name: str  # the form field's name: `<request key>.<property>`
    kind: str  # boolean | choice | number | integer | string | unsupported
    label: str
    description: str | None
    required: bool
    attrs: dict[str, str] = field(default_factory=dict)  # HTML constraint attributes
    options: list[tuple[str, str]] = field(default_factory=list)  # (value, label) for choices
    default: str | None = None
    hint: str | None = None  # the constraints in words, for everyone (and screen readers)
    #: Left empty, the answer is null (`"type": [..., "null"]`); such a field is never `required` in the form.
    nullable: bool = False

    @property
    def dom_id(self) -> str:
        return "f-" + "".join(c if c.isalnum() else "-" for c in self.input_name)


@dataclass
class Question:
    """One open input request of a job: its message and its fields."""

    key: str
    message: str
    fields: list[FormField]


def questions_of(input_requests: dict[str, Any] | None) -> list[Question]:
    out = []
    for key, request in (input_requests or {}).items():
        params = request.get("params") or {} if isinstance(request, dict) else {}
        schema = params.get("requestedSchema") or {}
        out.append(Question(key, str(params.get("message") or key), fields_of(key, schema)))
    return out


def fields_of(key: str, schema: dict[str, Any]) -> list[FormField]:
    required = set(schema.get("required") or [])
    return [_field(key, name, prop if isinstance(prop, dict) else {}, name in required)
            for name, prop in (schema.get("properties") or {}).items()]


def _choices(prop: dict[str, Any]) -> list[tuple[str, str]] | None:
    if isinstance(prop.get("enum"), list):
        names = prop["enumNames"] if isinstance(prop.get("enumNames"), list) else []
        return [(str(v), str(names[i]) if i < len(names) else str(v)) for i, v in enumerate(prop["enum"])
                if v is not None]  # null is the field left empty (see `_kind`)
    for combo in ("oneOf", "anyOf"):  # titled single-select enums: [{"const": ..., "title": ...}]
        items = prop.get(combo)
        if isinstance(items, list) and items and all(isinstance(i, dict) and "const" in i for i in items):
            return [(str(i["const"]), str(i.get("title") or i["const"])) for i in items]
    return None


def _kind(prop: dict[str, Any]) -> tuple[str, bool]:
    """The field's kind and whether it may be null: `"type": ["string", "null"]` (a marshmallow field with
    `allow_none=True`) is a string field that may be left empty."""
    declared = prop.get("type") or "string"
    if not isinstance(declared, list):
        return str(declared), False
    kinds = [str(k) for k in declared if k != "null"]
    return (kinds[0] if len(kinds) == 1 else "unsupported"), len(kinds) < len(declared)


def _field(key: str, name: str, prop: dict[str, Any], required: bool) -> FormField:
    kind, nullable = _kind(prop)
    out = FormField(name=name, input_name=f"{key}.{name}", kind=kind, label=str(prop.get("title") or name),
                    description=prop.get("description"), required=required and not nullable, nullable=nullable)
    if "default" in prop:
        out.default = _text(prop["default"])
    hints: list[str] = []
    options = _choices(prop)
    if options is not None:
        out.kind, out.options = "choice", options
    elif kind in ("number", "integer"):
        out.attrs["step"] = "1" if kind == "integer" else "any"
        for key_, attr, words in (("minimum", "min", "at least"), ("maximum", "max", "at most")):
            if isinstance(prop.get(key_), int | float):
                out.attrs[attr] = _text(prop[key_])
                hints.append(f"{words} {_text(prop[key_])}")
        if kind == "integer":
            hints.insert(0, "a whole number")
    elif kind == "string":
        out.attrs["type"] = _STRING_INPUT_TYPES.get(str(prop.get("format")), "text")
        for key_, attr, words in (("minLength", "minlength", "at least {} characters"),
                                  ("maxLength", "maxlength", "at most {} characters")):
            if isinstance(prop.get(key_), int):
                out.attrs[attr] = str(prop[key_])
                hints.append(words.format(prop[key_]))
        if isinstance(prop.get("pattern"), str):
            out.attrs["pattern"] = prop["pattern"]
            hints.append(f"matching {prop['pattern']}")
        if prop.get("format") in _STRING_INPUT_TYPES:
            hints.append(f"format: {prop['format']}")
    elif kind != "boolean":
        out.kind = "unsupported"
    if nullable and out.kind != "unsupported":
        hints.append("may be left empty")
    hint = "; ".join(hints)
    out.hint = f"{hint[:1].upper()}{hint[1:]}." if hint else None
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def answers_from_form(questions: list[Question], form: MultiDict[str, str]) -> dict[str, Any]:
    """`inputResponses` from a form post: declined as a whole, or each question's content.

    A value the browser should not have let through (text in a number field) is passed on as typed,
    so that the service says what is wrong with it rather than this layer guessing. So are answers to
    questions the page no longer knows (answered meanwhile, or the job moved on): the service ignores
    superseded questions and says when the job is no longer waiting."""
    known = {q.key for q in questions}
    others: dict[str, dict[str, Any]] = {}
    for name, posted in form.items():
        key, sep, prop = name.partition(".")
        if sep and key not in known:
            others.setdefault(key, {})[prop] = posted
    if form.get("_action") == "decline":
        return {key: {"action": "decline"} for key in [*known, *others]}
    out: dict[str, Any] = {key: {"action": "accept", "content": c} for key, c in others.items()}
    for q in questions:
        content: dict[str, Any] = {}
        for f in q.fields:
            raw = form.get(f.input_name)
            if f.nullable and not raw:
                content[f.name] = None  # left empty: null, which the question allows
                continue
            if raw is None or (raw == "" and f.kind != "string"):
                continue  # not answered: the service decides whether it was required
            if raw == "" and not f.required:
                continue
            content[f.name] = _value(f, raw)
        out[q.key] = {"action": "accept", "content": content}
    return out


def _value(f: FormField, raw: str) -> Any:
    if f.kind == "boolean":
        return {"true": True, "false": False}.get(raw, raw)
    if f.kind == "choice":
        return raw
    if f.kind in ("number", "integer"):
        try:
            number = float(raw)
        except ValueError:
            return raw
        if not math.isfinite(number):
            return raw
        return int(number) if number.is_integer() else number
    return raw


def errors_by_field(questions: list[Question], errors: Any) -> tuple[dict[str, str], list[str]]:
    """The service's messages (`{key: ["name: problem", ...]}`) by form field name, and the rest."""
    by_field: dict[str, str] = {}
    general: list[str] = []
    names = {q.key: {f.name for f in q.fields} for q in questions}
    for key, messages in (errors or {}).items() if isinstance(errors, dict) else ():
        for message in messages if isinstance(messages, list) else [messages]:
            name, sep, _ = str(message).partition(": ")
            if sep and name in names.get(key, ()):
                input_name = f"{key}.{name}"
                by_field[input_name] = "; ".join(filter(None, [by_field.get(input_name), str(message)]))
            else:
                general.append(str(message))
    return by_field, general
