"""kmq.aio in 30 lines: send from a coroutine, receive with async for, settle with await."""

import asyncio
import json

from kmq import Config, Service

config = Config.load()  # KMQ_BOOTSTRAP_SERVERS and other KMQ_* settings
service = Service(config)
service.create_topics(partitions=6, marker_partitions=3)  # once; or `kmq topics create`
emails = service.queue("emails")


async def main() -> None:
    async with emails.async_producer() as producer:
        await producer.send(b'{"to": "ada@example.com"}')  # returns the MessageId once durable
        pending = producer.send_async(b"not json")  # an asyncio Future; never blocks the event loop
        print("sent", await pending)

    async with emails.async_consumer() as consumer:  # joins the group (in a thread, not on the loop)
        settled = 0
        async for message in consumer:
            try:
                print("sending email to", json.loads(message.payload)["to"])
                await message.ack()  # done, never delivered again
            except ValueError as err:
                await message.reject(str(err))  # dead letter (written from a thread), never redelivered
            settled += 1
            if settled == 2:
                break


asyncio.run(main())
