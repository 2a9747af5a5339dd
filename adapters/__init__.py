"""The protocol adapters over the one job service: `http`, `mcp`, `a2a` and `ui`, a subpackage each.

Rule: translate a protocol to and from the service, nothing else. At this root: the app factory, the one
entrance and its fast path, how a protocol plugs in (`protocol`), and what the protocols share (bodies,
JSON-RPC envelopes, problem+json, server-sent events, probes and metrics).
"""
