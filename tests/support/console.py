"""Console transcripts in Markdown (```console blocks) read as steps, and their shown output checked.

A step is a command (a `$ ` line, continued on the next ones after a trailing backslash or inside an open
quote) and the lines shown after it. The shown output is a pattern for what the command prints (stdout and
stderr together):

- `…` alone on a line stands for any number of lines (none included); inside a line, for any text;
- `<id>` is a job id, `<time>` an RFC 3339 UTC time; any other `<words>` stands for some text on that line,
  and the text it stood for is remembered: a later command that says `<words>` gets that text
  (the banner's token, for instance, is pasted into the next commands as the reader pastes it);
- trailing spaces do not count.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

ELLIPSIS = "…"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"
_TOKEN = re.compile(r"…|<([a-zA-Z][\w .-]*)>")


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)
    line: int = 0  # where the command starts in the Markdown file (1-based), for messages


def console_steps(markdown: str) -> list[Step]:
    """Every step of every ```console block, in the order of the file."""
    steps: list[Step] = []
    lines = markdown.splitlines()
    inside = False
    pending: Step | None = None
    continued = False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            inside = line.strip() == "```console" if not inside else False
            pending, continued = None, False
            continue
        if not inside:
            continue
        if continued and pending is not None:
            pending.command += "\n" + line
            continued = _unfinished(pending.command)
        elif line.startswith("$ "):
            pending = Step(line[2:], line=number)
            steps.append(pending)
            continued = _unfinished(pending.command)
        elif pending is not None:
            pending.shown.append(line)
    return steps


def _unfinished(command: str) -> bool:
    """A command continues on the next line after a trailing backslash or inside an open quote."""
    if command.endswith("\\"):
        return True
    try:
        shlex.split(command)
    except ValueError:  # "No closing quotation"
        return True
    return False


def _line_regex(pattern: str) -> tuple[re.Pattern[str], list[str]]:
    parts, names, at = [], [], 0
    for token in _TOKEN.finditer(pattern):
        parts.append(re.escape(pattern[at:token.start()]))
        at = token.end()
        name = token.group(1)
        if name is None:
            parts.append(".*?")
        elif name == "id":
            parts.append(f"({UUID})")
            names.append(name)
        elif name == "time":
            parts.append(f"({TIME})")
            names.append(name)
        else:
            parts.append("(.+?)")
            names.append(name)
    parts.append(re.escape(pattern[at:]))
    return re.compile("".join(parts)), names


def match_lines(shown: list[str], actual: list[str]) -> dict[str, str] | None:
    """The placeholders' values if `actual` fits the `shown` pattern, else None."""
    shown = [s.rstrip() for s in shown]
    actual = [a.rstrip() for a in actual]
    while shown and not shown[-1]:
        shown.pop()
    while actual and not actual[-1]:
        actual.pop()
    return _match(shown, 0, actual, 0, {})


def _match(shown: list[str], i: int, actual: list[str], j: int, found: dict[str, str]) -> dict[str, str] | None:
    if i == len(shown):
        return found if j == len(actual) else None
    if shown[i] == ELLIPSIS:
        for k in range(j, len(actual) + 1):
            result = _match(shown, i + 1, actual, k, dict(found))
            if result is not None:
                return result
        return None
    if j == len(actual):
        return None
    regex, names = _line_regex(shown[i])
    hit = regex.fullmatch(actual[j])
    if hit is None:
        return None
    return _match(shown, i + 1, actual, j + 1, {**found, **dict(zip(names, hit.groups(), strict=True))})


def first_mismatch(shown: list[str], actual: list[str]) -> str:
    """A readable account of where `actual` leaves the `shown` pattern (for assertion messages)."""
    return "shown:\n  " + "\n  ".join(shown) + "\nprinted:\n  " + "\n  ".join(actual)


def fill(command: str, values: dict[str, str]) -> str:
    """`command` with every remembered `<placeholder>` replaced by the text it stood for."""
    for name, value in values.items():
        command = command.replace(f"<{name}>", value)
    return command
