"""Concurrency per key: `demo.charge` runs at most two charges per customer at once."""

import time

from tasks_backend import Principal, connect_service

service = connect_service()
me = Principal("shop")
charges = [service.submit(me, "demo.charge", {"customer_id": "acme", "amount": a, "seconds": 1})[0]
           for a in (10, 20, 30)]
while sum(service.get(me, c.id).state.value == "running" for c in charges) < 2:
    time.sleep(0.05)
print([service.get(me, c.id).state.value for c in charges])
print([service.wait(me, c.id, timeout_s=30).state.value for c in charges])
