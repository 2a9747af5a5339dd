"""Serving processes: the gunicorn worker and settings, draining held streams when a process stops, and
structured logs.

Rule: process plumbing, no job semantics. Imports the model, the settings and the store only.
"""
