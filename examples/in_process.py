from tasks_backend import Principal, connect_service

service = connect_service()  # the same Settings.from_env() the server reads: REDIS_URL above
me = Principal("reports-app")
record, outcome = service.submit(me, "demo.export", {"rows": 2}, idempotency_key="export-2026-11-29")
print(record.id, record.state, outcome)
done = service.wait(me, record.id, timeout_s=60)
print(done.state, done.result["rows"])
