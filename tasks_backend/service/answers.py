"""Answers to a job's input requests: the shape they are kept in, and their problems against the request.

Rule: an answer is checked against exactly the schema the job asked with; what JSON Schema says about the
content is `model.validation`'s to judge, this module only adds what an elicitation result itself must be.
"""

from __future__ import annotations

from typing import Any

from ..model.validation import answer_problems


def normalize_answer(value: Any) -> dict[str, Any]:
    """An input response as an elicitation result: `{"action": ..., "content": {...}}`.

    MCP clients send that shape; plain HTTP callers may send just the content.
    """
    if isinstance(value, dict) and value.get("action") in ("accept", "decline", "cancel"):
        out: dict[str, Any] = {"action": value["action"]}
        if value["action"] == "accept":
            out["content"] = value.get("content", {})
        return out
    return {"action": "accept", "content": value}


def check_answer(schema: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """The problems of an accepted answer against exactly the schema the job asked with (JSON Schema)."""
    if answer["action"] != "accept":
        return []
    content = answer.get("content")
    if not isinstance(content, dict):
        return ["the answer must be a JSON object"]
    return answer_problems(schema, content)
