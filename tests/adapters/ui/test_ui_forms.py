"""Questions as form fields and form posts as answers (the browser test drives the same code end to end)."""

from __future__ import annotations

from werkzeug.datastructures import MultiDict

from adapters.ui.forms import answers_from_form, errors_by_field, fields_of, questions_of
from tests.support.jobs import SHIPPING_FORM


def test_each_kind_of_property_becomes_a_field_with_its_constraints() -> None:
    fields = {f.name: f for f in fields_of("shipping", SHIPPING_FORM)}
    assert (fields["speed"].kind, fields["speed"].options) == (
        "choice", [("standard", "Standard (3-5 days)"), ("express", "Express (next day)")])
    assert fields["boxes"].attrs == {"step": "1", "min": "1", "max": "20"} and fields["boxes"].required
    assert fields["boxes"].hint == "A whole number; at least 1; at most 20."
    assert fields["weight"].attrs == {"step": "any", "min": "0.1"} and not fields["weight"].required
    assert fields["email"].attrs == {"type": "email", "maxlength": "120"}
    assert (fields["gift"].kind, fields["gift"].default) == ("boolean", "false")
    titled = fields_of("k", {"properties": {"c": {"type": "string", "oneOf": [{"const": "a", "title": "A!"}]},
                                            "p": {"type": "string", "pattern": "^[A-Z]+$"},
                                            "o": {"type": "object"}}})
    assert titled[0].options == [("a", "A!")]
    assert titled[1].attrs == {"type": "text", "pattern": "^[A-Z]+$"} and titled[1].hint == "Matching ^[A-Z]+$."
    assert titled[2].kind == "unsupported"


def test_a_post_becomes_typed_answers_and_what_cannot_be_typed_is_passed_on() -> None:
    questions = questions_of({"shipping": {"params": {"message": "How?", "requestedSchema": SHIPPING_FORM}}})
    form = MultiDict({"shipping.speed": "express", "shipping.boxes": "3", "shipping.weight": "2.5",
                      "shipping.email": "", "shipping.gift": "true", "shipping.unknown": "x"})
    assert answers_from_form(questions, form) == {"shipping": {"action": "accept", "content": {
        "speed": "express", "boxes": 3, "weight": 2.5, "gift": True}}}
    typed = answers_from_form(questions, MultiDict({"shipping.boxes": "three", "shipping.weight": "nan"}))
    assert typed["shipping"]["content"] == {"boxes": "three", "weight": "nan"}  # the service says what is wrong
    assert answers_from_form(questions, MultiDict({"_action": "decline"})) == {"shipping": {"action": "decline"}}


def test_the_services_messages_go_beside_the_fields_they_name() -> None:
    questions = questions_of({"shipping": {"params": {"message": "How?", "requestedSchema": SHIPPING_FORM}}})
    by_field, general = errors_by_field(questions, {"shipping": ["boxes: required", "speed: must be string",
                                                                 "the answer must be a JSON object"],
                                                    "other": ["x: required"]})
    assert by_field == {"shipping.boxes": "boxes: required", "shipping.speed": "speed: must be string"}
    assert general == ["the answer must be a JSON object", "x: required"]


def test_answers_to_questions_the_page_no_longer_knows_are_passed_on_for_the_service_to_judge() -> None:
    posted = MultiDict({"approval.approved": "true", "_action": "accept", "csrf": "x"})
    assert answers_from_form([], posted) == {"approval": {"action": "accept", "content": {"approved": "true"}}}
    assert answers_from_form([], MultiDict({"approval.approved": "true", "_action": "decline"})) == {
        "approval": {"action": "decline"}}


def test_a_nullable_property_is_a_field_that_may_be_left_empty_and_then_answers_null() -> None:
    schema = {"type": "object", "required": ["copies"], "properties": {
        "note": {"type": ["string", "null"]}, "copies": {"type": ["integer", "null"], "minimum": 1},
        "size": {"type": ["string", "null"], "enum": ["s", "m", None]}, "odd": {"type": ["string", "integer"]}}}
    fields = {f.name: f for f in fields_of("q", schema)}
    assert (fields["note"].kind, fields["note"].nullable, fields["note"].required) == ("string", True, False)
    assert (fields["copies"].kind, fields["copies"].attrs) == ("integer", {"step": "1", "min": "1"})
    assert fields["copies"].hint == "A whole number; at least 1; may be left empty."
    assert (fields["size"].kind, fields["size"].options) == ("choice", [("s", "s"), ("m", "m")])
    assert fields["odd"].kind == "unsupported"
    questions = questions_of({"q": {"params": {"message": "?", "requestedSchema": schema}}})
    posted = MultiDict({"q.note": "", "q.copies": "", "q.size": "m"})
    assert answers_from_form(questions, posted)["q"]["content"] == {"note": None, "copies": None, "size": "m"}
