"""The state table is the only source of allowed transitions: no script names a state of its own."""

from __future__ import annotations

import re

from tasks_backend.model.domain import JobState
from tasks_backend.store import scripts as lua


def test_no_script_names_a_state_itself() -> None:
    bodies = list(lua.SOURCES.values())
    for body in bodies:
        for state in JobState:
            assert not re.search(rf"""['"]{state.value}['",]|,{state.value}['"]""", body), state


def test_renamed_states_reach_every_script() -> None:
    renamed = {s: f"renamed_{s.name.lower()}" for s in JobState}
    scripts = lua.render(renamed)
    text = "\n".join(scripts.values())
    assert "$" not in text  # every placeholder was filled
    for state in JobState:
        assert not re.search(rf"""['",]{state.value}['",]""", text), state
    assert "'renamed_running'" in scripts["claim"]
    assert "'renamed_cancelled,renamed_completed,renamed_failed'" in scripts["transition"]
    assert "'renamed_input_required,renamed_queued,renamed_running,renamed_suspended'" in scripts["cancel"]
    assert lua.render() == lua.SCRIPTS
