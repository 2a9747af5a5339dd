"""The field table names every field of a job hash, and Python names a field nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

from tasks_backend.model.domain import JobState
from tasks_backend.store import fields, scripts
from tasks_backend.store import schedules as schedule_fields
from tasks_backend.store.fields import Change

ROOT = Path(__file__).resolve().parents[3]


#: Scripts whose KEYS[1] is a hash of another kind: an owner's webhook secret.
OTHER_HASHES = {"push/secret.lua"}


def job_sources() -> list[str]:
    """Every script but the limits' (`limits/`, and the libraries only they use): their KEYS[1] is an owner's
    rate hash or an address's failure hash, not a job hash; nor those of `OTHER_HASHES`, nor the questions' (an
    answer link's hash, `keys.answer_link`)."""
    limits = {p for p in scripts.SOURCES if p.startswith("limits/")}
    theirs = {f"lib/{lib}.lua" for p in limits for lib in scripts.uses(scripts.SOURCES[p])}
    others = {f"lib/{lib}.lua" for p in set(scripts.SOURCES) - limits for lib in scripts.uses(scripts.SOURCES[p])}
    assert theirs and not theirs & others
    questions = {p for p in scripts.SOURCES if p.startswith("questions/")}
    skipped = limits | theirs | schedule_paths() | OTHER_HASHES | questions
    return [source for p, source in scripts.SOURCES.items() if p not in skipped]


def schedule_paths() -> set[str]:
    """The schedules' scripts whose KEYS[1] is a schedule hash (`mark_job` writes a job's)."""
    return {p for p in scripts.SOURCES if p.startswith("schedules/") and p != "schedules/mark_job.lua"}


def lua_fields(sources: list[str] | None = None) -> set[str]:
    """The job-hash fields the scripts read or write: names passed with KEYS[1] (the job hash), `h.name`."""
    found: set[str] = set()
    for source in job_sources() if sources is None else sources:
        for call in re.findall(r"redis\.call\('H(?:SET|MGET|DEL|GET|SETNX|EXISTS)', KEYS\[1\],([^)]*)\)", source):
            found |= set(re.findall(r"'([a-z]+)'", call))
        found |= set(re.findall(r"\bh\.([a-z]+)\b", source))
    return found


def test_every_field_a_script_touches_is_in_the_table() -> None:
    touched = lua_fields()
    assert {"rq", "ctok", "ckpt", "mark", "gone", "repub", "lease", "worker"} <= touched
    assert touched - set(fields.BY_NAME) == set()
    assert len(fields.BY_NAME) == len(fields.FIELDS)
    assert all(f.meaning and f.writer for f in fields.FIELDS)


def test_every_field_a_schedule_script_touches_is_in_the_schedules_table() -> None:
    touched = lua_fields([scripts.SOURCES[p] for p in schedule_paths()])
    assert {"body", "gen", "next", "pending", "paused"} <= touched
    assert touched - set(schedule_fields.FIELDS) == set()


def test_no_module_outside_the_store_writes_a_field_by_name() -> None:
    """`"lease": ""` and the like belonged to the running layer; the store's named changes replace them."""
    outside = [p for folder in ("tasks_backend", "workers", "adapters") for p in (ROOT / folder).rglob("*.py")
               if (ROOT / "tasks_backend" / "store") not in p.parents]
    pattern = re.compile(r"""["'](lease|worker|inreq|ctok|ckpt|rq|attempts|retries)["']\s*:\s*["']""")
    assert [str(p.relative_to(ROOT)) for p in outside if pattern.search(p.read_text(encoding="utf-8"))] == []


def test_a_record_round_trips_through_its_fields() -> None:
    new = fields.new_job(owner="alice", operation="test.noop", ttl_ms=60_000, poll_ms=100, params_json='{"a":1}',
                         idempotency_key="k")
    assert next(iter(new)) == fields.STATE  # the scripts read the state from the first pair
    record = fields.created_record("j1", new, 1_000)
    assert (record.owner, record.operation, record.state, record.created_ms, record.updated_ms) == (
        "alice", "test.noop", JobState.QUEUED, 1_000, 1_000)
    assert (record.ttl_ms, record.poll_ms, record.params, record.idempotency_key) == (60_000, 100, {"a": 1}, "k")


def test_a_finished_run_gives_up_its_lease_and_worker() -> None:
    pairs = Change.completed("1").pairs()
    assert dict(zip(pairs[::2], pairs[1::2], strict=True)) == {"result": "1", "lease": "", "worker": ""}
    parked = Change.parked("{}", "Why?").pairs()
    assert dict(zip(parked[::2], parked[1::2], strict=True)) == {
        "inreq": "{}", "msg": "Why?", "attempts": "0", "lease": "", "worker": ""}
    assert Change(error_json="{}").pairs() == ["error", "{}"]
