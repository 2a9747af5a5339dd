from tasks_backend.client import Client, JobFailed

with Client() as tasks:  # TASKS_BACKEND_URL and TASKS_BACKEND_TOKEN
    job = tasks.submit("demo.export", {"rows": 2})
    print(job.id, job.status)
    print(tasks.result(job, timeout=60)["rows"])
    try:
        tasks.run("demo.fail", {"message": "no disk"}, timeout=60)
    except JobFailed as exc:
        print("failed:", exc)
