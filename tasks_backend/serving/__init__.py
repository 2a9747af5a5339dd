"""Serving processes: the gunicorn worker, settings and access line, draining held streams when a process stops,
structured logs, and traces (OpenTelemetry spans, exported only when the OTLP endpoint is set).

Rule: process plumbing, no job semantics. Imports the model, the settings and the store only.
"""
