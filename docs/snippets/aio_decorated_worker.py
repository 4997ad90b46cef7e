"""The same handler as a decorated worker: @queue.worker on an async def."""

from kmq import Config, Message, Service

emails = Service(Config.load()).queue("emails")


@emails.worker(concurrency=100)
async def handle(message: Message) -> None:
    print("done", message.payload.decode(), flush=True)


if __name__ == "__main__":
    handle.run()  # until SIGTERM or Ctrl-C: running handlers finish, the rest go back
