"""The service: `JobService` (submit, get, list, cancel, provide_input, watch), its listing cursors (`cursors`)
and input answers (`answers`), and the factories that wire settings into a runtime.

Rule: the semantics every protocol and the Python API share; every call that names a job checks its owner.
Imports every layer below it, and no protocol.
"""
