"""Plain HTTP: `/v1/jobs`, `/v1/schedules`, `/v1/operations` and `/openapi.json`.

Rule: translation only; HTTP statuses come from `adapters.problems`.
"""
