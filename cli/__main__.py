"""`python -m cli`: the same program as the `tasks-backend` console script."""

# Absolute: a Celery worker restarted by SIGHUP runs this file again by its path, as a script.
from cli.main import main

main()
