"""Access: who is calling (`auth`: bearer tokens, token files, JWTs; `gate`: the one call an entrance makes per
request) and the limits each caller is held to: the `policy` the service is handed, the one kept in Redis
(`limits`) and its parts by kind (`rate`, `active`, `streams`, their Lua in `store/scripts/limits/`).

Rule: secrets are compared in constant time and never logged. Imports the layers below the service.
"""
