"""`python -m cli`: the same program as the `tasks-backend` console script."""

from .main import main

main()
