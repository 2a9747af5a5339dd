"""The Lua scripts behind every state change, as `.lua` files beside this module, and their rendering.

Each file opens with a comment naming the KEYS and ARGV it takes. A script runs as `prelude.lua`, then the
`lib/` files its `-- Uses:` line names, then its own body; state names (`$RUNNING`) and sets of states
(`$TERMINAL`, `$CANCELLABLE`, `$CLAIMABLE`) are rendered from `model.domain`'s state table, so which state
may follow which is decided there only. A job script touches one job's keys (one hash tag); the others one
key, or one job's or one owner's (`limits/`): every script runs in one Redis Cluster slot. Redis is the one
clock (`clock()`, `clock_us()`), and a script applied twice gives the same outcome (see `store.runner`).

Rule: a script touches only the keys it is given (KEYS), and names no state itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from string import Template

from ...model.domain import TERMINAL_STATES, JobState, sources_of

PRELUDE = "prelude.lua"
LIB = "lib"


def _files() -> dict[str, str]:
    """Every `.lua` file here, by its path below this folder."""
    out: dict[str, str] = {}

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(".lua"):
                out[prefix + entry.name] = entry.read_text(encoding="utf-8")

    walk(resources.files(__name__), "")
    return out


#: The text of every `.lua` file, by path ("claim.lua", "lib/job.lua", "push/put.lua"...).
SOURCES: dict[str, str] = _files()


def uses(source: str) -> list[str]:
    """The `lib/` files a script's opening comment names on its `-- Uses:` line."""
    for line in source.splitlines():
        if not line.startswith("--"):
            break
        if line.startswith("-- Uses:"):
            return line.removeprefix("-- Uses:").split()
    return []


def script_name(path: str) -> str:
    """A script's name from its path: "claim.lua" -> "claim", "push/put.lua" -> "push.put"."""
    return path.removesuffix(".lua").replace("/", ".")


def _csv(states: frozenset[JobState] | tuple[JobState, ...], names: Mapping[JobState, str]) -> str:
    return "'" + ",".join(sorted(names[s] for s in states)) + "'"


def state_names(names: Mapping[JobState, str] | None = None) -> dict[str, str]:
    """The placeholders of the scripts: each state's name as a Lua string, and the sets of states the
    scripts check, taken from the state table. `names` renames states (to check that nothing else
    in a script names one)."""
    names = names or {s: s.value for s in JobState}
    out = {s.name: f"'{names[s]}'" for s in JobState}
    out.update({
        "TERMINAL": _csv(TERMINAL_STATES, names),
        "CANCELLABLE": _csv(sources_of(JobState.CANCELLED), names),
        # A lapsed run is claimed again as well: that is a takeover by a new token, not a transition.
        "CLAIMABLE": _csv(tuple(s for s in sources_of(JobState.RUNNING) if s is not JobState.RUNNING), names),
    })
    return out


def compose(source: str, names: Mapping[JobState, str] | None = None) -> str:
    """One script as sent to Redis: the prelude, the libraries its `-- Uses:` line names, then `source`, with the
    state names substituted. For a script kept outside this folder as well (hand the result to a `ScriptRunner`)."""
    parts = [SOURCES[PRELUDE], *(SOURCES[f"{LIB}/{lib}.lua"] for lib in uses(source)), source]
    return Template("\n".join(parts)).substitute(state_names(names))


def render(names: Mapping[JobState, str] | None = None) -> dict[str, str]:
    """Every script of this folder by name, composed (see `compose`)."""
    return {script_name(path): compose(source, names) for path, source in SOURCES.items()
            if path != PRELUDE and not path.startswith(LIB + "/")}


#: Every script by name ("claim", "push.put", "catalog.publish"...), rendered.
SCRIPTS: dict[str, str] = render()
