"""tasks-backend: accept long-running work at once and hand back task handles."""

from .auth import Principal
from .config import Settings
from .domain import JobRecord, JobState, SubmitOutcome
from .errors import TasksBackendError
from .execution import JobContext
from .registry import job
from .runtime import build_runtime, connect_service
from .service import JobService

__version__ = "0.1.0"

__all__ = [
    # defining jobs
    "JobContext",
    "job",
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
