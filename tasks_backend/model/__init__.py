"""The model: job states and the one transition table, the job record, how a state reads in each wire form,
and the handle's wire dictionaries.

Rule: plain data and pure functions. Imports nothing of the project but `tasks_backend.errors`.
"""
