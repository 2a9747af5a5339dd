"""The Python clients' `rerun` and `bulk` against the app over real HTTP and a worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.client import AsyncClient, Client
from tasks_backend.errors import BadRequest

pytestmark = pytest.mark.usefixtures("worker")


def test_both_clients_rerun_and_act_in_bulk(live_url: str, users: Any, tmp_path: Path) -> None:
    _, token = users.new("client-op")
    params = {"ledger": str(tmp_path / "ledger"), "switch": str(tmp_path / "switch")}
    with Client(live_url, token) as tasks:
        original = tasks.submit("test.fails_until", params)
        assert tasks.wait(original.id, timeout=20).status == "failed"
        with pytest.raises(BadRequest):
            tasks.bulk("explode")
        dry = tasks.wait(tasks.bulk("rerun", {"status": "failed"}, dry_run=True).id, timeout=20)
        assert dry.result["ids"] == [original.id]
        again = tasks.rerun(original.id, idempotency_key="once")
        assert again.rerun_of == original.id and tasks.rerun(original.id, idempotency_key="once").id == again.id
        assert tasks.wait(again.id, timeout=20).status == "failed"

    async def scenario() -> None:
        async with AsyncClient(live_url, token) as aio:
            made = await aio.rerun(original.id, keep_steps=True)
            assert made.rerun_of == original.id
            assert (await aio.wait(made.id, timeout=20)).status == "failed"  # the switch is still off
            bulk = await aio.wait((await aio.bulk("rerun", {"status": "failed"})).id, timeout=20)
            assert bulk.result["done"] == 3  # the original and both reruns failed

    asyncio.run(scenario())
