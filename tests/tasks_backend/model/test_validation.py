"""Values against JSON Schemas (Draft 2020-12): the messages name their property, and no schema makes a crash."""

from __future__ import annotations

from tasks_backend.model.validation import answer_problems, params_problems


def test_each_problem_names_its_property_in_a_few_words() -> None:
    schema = {"type": "object", "required": ["a", "b"], "additionalProperties": False, "properties": {
        "a": {"type": ["integer", "null"], "exclusiveMinimum": 0}, "b": {"anyOf": [{"type": "string"}, {"const": 1}]},
        "c": {"type": "object", "properties": {"d": {"type": "string", "maxLength": 2}}}}}
    assert answer_problems(schema, {"a": 0, "b": 2, "c": {"d": "long"}, "e": 1}) == [
        "e: not asked for", "a: must be more than 0", "b: matches none of the allowed forms",
        "c.d: must be at most 2 characters"]
    assert answer_problems(schema, {"a": None, "b": 1}) == []
    assert params_problems(schema, {"a": None}) == {"b": ["required"]}
    assert params_problems({"type": "object"}, []) == {"_schema": ["must be object"]}


def test_a_schema_that_is_not_json_schema_is_a_problem_not_a_crash() -> None:
    assert answer_problems({"type": 5}, {"x": 1}) == [
        "the requested schema is not valid JSON Schema (5 is not valid under any of the given schemas)"]
