"""`python -m tasks_backend.cli`: the same program as the `tasks-backend` console script."""

# Absolute: a Celery worker restarted by SIGHUP runs this file again by its path, as a script.
from tasks_backend.cli.main import main

main()
