"""Fair shares: one principal floods the queue with 200 jobs; another principal's job still starts next."""

import contextlib

from tasks_backend import Principal, connect_service
from tasks_backend.errors import JobNotCancelable

service = connect_service()
flood, other = Principal("flood-app"), Principal("other-app")
jobs = [service.submit(flood, "demo.sleep", {"seconds": 0.1, "steps": 1})[0] for _ in range(200)]
mine, _ = service.submit(other, "demo.sleep", {"seconds": 0.1, "steps": 1})
done = service.wait(other, mine.id, timeout_s=60)
ran = sum(service.get(flood, job.id).state.value != "queued" for job in jobs)
print(done.state.value, "while most of the flood still waited:", ran < 50)
for job in jobs:
    with contextlib.suppress(JobNotCancelable):
        service.cancel(flood, job.id)
