"""Running jobs: the registry of job functions, dispatch to the broker (Redis or RabbitMQ), a worker's claim,
context and outcome, the sweeper, and the metrics they record.

Rule: changes a job only through the store's scripts; knows no protocol. Imports the model and the store.
"""
