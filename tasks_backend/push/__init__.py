"""Push: subscriptions kept beside a job, the webhook target guard and one POST with a deadline, and the delivery
loop that posts each subscription's events (owners served fairly, a breaker per owner and target).

Rule: a subscription's body and headers belong to the adapter that stored it (its format, handed in by the
command line); nothing here knows a protocol. Imports the model, the store and the settings.
"""
