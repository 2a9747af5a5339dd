"""Push: subscriptions kept beside a job, the webhook target guard, and one POST with a deadline.

Rule: a subscription's body and headers belong to the adapter that stored it (its format, handed in by the
command line); nothing here knows a protocol. Imports the model and the store.
"""
