"""The web page for people, under `/ui`: pages, forms, templates and static files.

Rule: translation only; whether an answer is acceptable is the service's call.
"""
