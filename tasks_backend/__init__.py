"""tasks-backend: accept long-running work at once and hand back task handles.

This module is the in-process API. Beside it at the root: `client` (the HTTP client), `errors` (the one error
tree), `config` (`Settings`) and `demo` (the demo jobs). The layers are subpackages, each stating its rule:
model, store, then running, push, access and serving, then service; `devtools` and `cli` beside them.
"""

from .access.auth import Principal
from .config import Settings
from .errors import TasksBackendError
from .model.domain import JobRecord, JobState, SubmitOutcome
from .remote.access import RemoteError
from .remote.status import RemoteTaskFailed
from .running.context import ChildFailed, JobContext
from .running.declared import schedule
from .running.registry import Concurrency, job
from .service.jobs import JobService
from .service.runtime import build_runtime, connect_service

__version__ = "0.1.0"

__all__ = [
    # defining jobs
    "ChildFailed",
    "Concurrency",
    "JobContext",
    "RemoteError",
    "RemoteTaskFailed",
    "job",
    "schedule",
    # using the service in process
    "JobRecord",
    "JobService",
    "JobState",
    "Principal",
    "Settings",
    "SubmitOutcome",
    "TasksBackendError",
    "build_runtime",
    "connect_service",
]
