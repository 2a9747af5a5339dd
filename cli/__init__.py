"""The `tasks-backend` program: the composition root that starts the web app, a worker, the sweeper,
Flower, or all of them (`run`), plus the commands that talk to a running server.

It lives outside `tasks_backend` because it wires the core to `adapters` (the web app) and `workers`
(Celery); the core imports neither.
"""

from .main import main

__all__ = ["main"]
