"""The Celery side: the app factory, the one generic runner task, what Flower shows, and the bootstep that runs
push delivery.

Rule: imports `tasks_backend`, never `adapters`; push formats are handed in by the command line.
"""
