"""The transcript reader the README test relies on: what it accepts and what it refuses."""

from __future__ import annotations

from tests.support.console import console_steps, fill, match_lines

README = '''
text
```console
$ make run
…
ready on http://127.0.0.1:8000
  export TASKS_BACKEND_TOKEN=<token>
$ curl -s -d '{"a": 1,
    "b": 2}' \\
    "$URL"
{"taskId":"<id>","createdAt":"<time>",…}
```
```python
$ not a step
```
'''


def test_steps_are_read_in_order_with_their_continuations() -> None:
    steps = console_steps(README)
    assert [s.command.splitlines()[0] for s in steps] == ["make run", """curl -s -d '{"a": 1,"""]
    assert steps[1].command.splitlines()[-1] == '    "$URL"'
    assert steps[0].shown[-1] == "  export TASKS_BACKEND_TOKEN=<token>"


def test_placeholders_and_ellipses_match_and_remember() -> None:
    steps = console_steps(README)
    found = match_lines(steps[0].shown, ["pip output", "more", "ready on http://127.0.0.1:8000",
                                         "  export TASKS_BACKEND_TOKEN=abc123 "])
    assert found == {"token": "abc123"}
    assert fill("export X=<token>", found) == "export X=abc123"
    assert match_lines(steps[1].shown, [
        '{"taskId":"3b6c559d-89cb-4007-89b9-3cc13edb6897","createdAt":"2026-12-01T01:52:23.528Z","x":1}']) == {
        "id": "3b6c559d-89cb-4007-89b9-3cc13edb6897", "time": "2026-12-01T01:52:23.528Z"}


def test_a_different_output_does_not_match() -> None:
    steps = console_steps(README)
    assert match_lines(steps[0].shown, ["ready on http://127.0.0.1:8001", "  export TASKS_BACKEND_TOKEN=a"]) is None
    assert match_lines(steps[0].shown, ["ready on http://127.0.0.1:8000"]) is None  # a line is missing
    assert match_lines(steps[1].shown, ['{"taskId":"not-an-id","createdAt":"2026-12-01T01:52:23.528Z"}']) is None
    assert match_lines(["a"], ["a", "b"]) is None  # no `…`: nothing more may follow
