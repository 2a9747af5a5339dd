"""A2A 1.0 at `/a2a` and the agent card: the JSON-RPC endpoint, the ProtoJSON wire forms, push-notification
configs and the push format the workers post them in.

Rule: translation only; the wire forms are pure functions, shared by the endpoint and push delivery.
"""
