"""kmq for asyncio: ``AsyncProducer``, ``AsyncConsumer`` and the ``AsyncMessage`` it hands out.

A thin facade over the sync clients, not a second implementation: the same Producer and Consumer do the Kafka
work on their own threads; the facade takes from the consumer's ready buffer without blocking, sleeps on the event
loop until the consumer says messages are ready (``Consumer.on_ready`` → ``loop.call_soon_threadsafe``), and runs
only what truly blocks (starting and closing a consumer, a reject's dead-letter write, flush) in the executor.

    async with queue.async_consumer() as consumer:
        async for message in consumer:
            await handle(message.payload)
            await message.ack()

Coroutine handlers in a worker (``kmq worker mod:async_handler``, ``@queue.worker``) need nothing from here: the
worker sees ``async def`` and runs them on one event loop.
"""

from kmq.aio.consumer import AsyncConsumer
from kmq.aio.message import AsyncMessage
from kmq.aio.producer import AsyncProducer

__all__ = ["AsyncConsumer", "AsyncMessage", "AsyncProducer"]
