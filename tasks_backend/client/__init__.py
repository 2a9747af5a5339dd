"""A small client for the HTTP API, for callers in other processes: `Client` (sync) and `AsyncClient`.

    with Client("http://127.0.0.1:8000", token) as tasks:
        job = tasks.submit("demo.export", {"rows": 1000})
        result = tasks.result(tasks.wait(job.id))

Rule: a face of the HTTP API only; errors are rebuilt through `tasks_backend.errors`' table, so `except
JobNotFound:` means the same in process and over HTTP; a retried submit reuses its idempotency key, and
waiting polls at the job's own `pollIntervalMs` (or the server's `Retry-After`).
"""

# Names outside `__all__` that callers import today (DEFAULT_URL by the command line): re-exported by name.
from .async_client import AsyncClient
from .protocol import CANCELLED as CANCELLED
from .protocol import COMPLETED as COMPLETED
from .protocol import DEFAULT_URL as DEFAULT_URL
from .protocol import FAILED as FAILED
from .protocol import INPUT_REQUIRED as INPUT_REQUIRED
from .protocol import SETTLED as SETTLED
from .protocol import TERMINAL as TERMINAL
from .protocol import Job, JobCancelled, JobFailed, Page, ServerUnreachable
from .protocol import error_from_response as error_from_response
from .sync_client import Client

__all__ = [
    "AsyncClient",
    "Client",
    "Job",
    "JobCancelled",
    "JobFailed",
    "Page",
    "ServerUnreachable",
]
