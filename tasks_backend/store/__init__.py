"""The store: every Redis key, every job-hash field, the Lua scripts and their runner, the job store and per-job
metadata, and connecting to Redis (one server, a Cluster, or through Sentinel).

Rule: the only part that talks to Redis about jobs; a Redis error becomes `StoreUnavailable` here, every key
is built in `keys` and has a TTL. Imports the model and the settings only.
"""
