"""Access: who is calling (bearer tokens, token files, JWTs) and the limits each caller is held to.

Rule: secrets are compared in constant time and never logged. Imports the layers below the service.
"""
