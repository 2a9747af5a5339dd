"""The `tasks-backend` program (also `python -m tasks_backend.cli`): the composition root that starts the web
app, a worker, the sweeper, Flower, or all of them (`run`), plus the commands that talk to a running server.

Rule: the top of the layers, and the only part of `tasks_backend` that imports `adapters` and `workers`.
"""

from .main import main

__all__ = ["main"]
