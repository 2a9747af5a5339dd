"""MCP at `/mcp`: the endpoint that picks a revision, the 2025-11-25 and 2026-07-28 revisions, and the tools
both revisions share.

Rule: translation only; each revision's shapes stay in its own module.
"""
