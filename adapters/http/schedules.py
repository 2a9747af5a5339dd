"""Plain HTTP over the schedule service: `/v1/schedules`. Translation only."""

from __future__ import annotations

from urllib.parse import quote

from flask import Blueprint, Response, current_app, g, jsonify, request

from tasks_backend.service.runtime import Runtime
from tasks_backend.service.schedules import ScheduleService

from ..protocol import Adapter
from .jobs import json_body
from .query import page_limit

bp = Blueprint("schedules", __name__, url_prefix="/v1")
ADAPTER = Adapter("schedules", bp)


def _service() -> ScheduleService:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return runtime.schedules()


@bp.post("/schedules")
def define() -> Response:
    """201 with the schedule when made; 200 when the same definition was already there; 409 for another."""
    schedule, made = _service().define(g.principal, json_body())
    response = jsonify(schedule.wire())
    response.status_code = 201 if made else 200
    response.headers["Location"] = f"/v1/schedules/{quote(schedule.name, safe='')}"
    return response


@bp.get("/schedules")
def list_schedules() -> Response:
    """A page of the caller's schedules, oldest first (`limit`, default 50, and `cursor`, like `GET /v1/jobs`)."""
    limit = page_limit()
    schedules, cursor = _service().page(g.principal, limit=limit, cursor=request.args.get("cursor") or None)
    return jsonify({"schedules": [s.wire() for s in schedules], "nextCursor": cursor})


@bp.get("/schedules/<name>")
def get_schedule(name: str) -> Response:
    return jsonify(_service().get(g.principal, name).wire())


@bp.delete("/schedules/<name>")
def delete_schedule(name: str) -> Response:
    _service().delete(g.principal, name)
    return Response(status=204)


@bp.post("/schedules/<name>/pause")
def pause(name: str) -> Response:
    return jsonify(_service().pause(g.principal, name).wire())


@bp.post("/schedules/<name>/resume")
def resume(name: str) -> Response:
    return jsonify(_service().resume(g.principal, name).wire())
