"""A worker in your own program: @queue.worker turns a handler into a Worker; run() serves until SIGTERM/SIGINT."""

from kmq import Config, Message, Service

emails = Service(Config.load()).queue("emails")


@emails.worker(concurrency=8, time_limit_s=60)
def send_email(message: Message) -> None:  # return → ack; kmq.Reject → dead letter; an exception → retry
    print("sending", message.payload.decode(), flush=True)


if __name__ == "__main__":
    counts = send_email.run()  # drains on SIGTERM: running handlers finish, prefetched messages are given back
    print(dict(counts))
