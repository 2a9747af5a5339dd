import asyncio

from tasks_backend.client import AsyncClient


async def main() -> None:
    async with AsyncClient() as tasks:
        job = await tasks.submit("demo.sleep", {"seconds": 1, "steps": 4})
        async for update in tasks.events(job.id):
            print(update.status, update.status_message)


asyncio.run(main())
