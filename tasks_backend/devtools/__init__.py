"""Development tools: an embedded Redis and Redis Cluster, and the supervisor behind `tasks-backend run`.

Rule: for development, tests and benchmarks; only the command line's `run` imports them.
"""
