"""Loading job modules: a name that cannot be imported says how to fix the setting."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tasks_backend.running.registry import JobModuleNotFound, Registry


def test_demo_jobs_load() -> None:
    names = {spec.name for spec in Registry.from_modules(["tasks_backend.demo"])}
    assert {"demo.sleep", "demo.export", "demo.refund", "demo.fail"} <= names


def test_an_unknown_module_names_the_setting_and_pythonpath() -> None:
    with pytest.raises(JobModuleNotFound) as caught:
        Registry.from_modules(["tasks_backend.demo", "acme_jobs.reports"])
    text = str(caught.value)
    assert "TASKS_BACKEND_JOBS" in text and "'acme_jobs.reports'" in text
    assert "PYTHONPATH" in text and "tasks_backend.demo" in text
    assert isinstance(caught.value, ImportError)  # callers that catch ImportError still do


def test_a_missing_dependency_of_a_job_module_is_told_apart(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobs_needing_more.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(JobModuleNotFound, match="Importing the job module 'jobs_needing_more' failed"):
            Registry.from_modules(["jobs_needing_more"])
    finally:
        sys.modules.pop("jobs_needing_more", None)


def test_every_job_has_a_description_to_publish() -> None:
    # MCP clients (the conformance suite's tools-list) and A2A skills require one; a job without a
    # description or docstring gets one from its name.
    registry = Registry.from_modules(["tasks_backend.demo", "tests.support.jobs"])
    assert registry.get("test.noop").description == "Runs test.noop."
    assert all(spec.description for spec in registry)
