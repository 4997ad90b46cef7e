"""A worker process for functional tests: ``python -m tests.worker_proc QUEUE HOLD ACK``.

Receives HOLD messages, acks the first ACK of them, prints one JSON line per message, then HOLDING, and
waits (to be killed with SIGKILL by the test).
"""

from __future__ import annotations

import json
import sys
import time

from kmq import Config, Service, logs


def main() -> None:
    queue, hold, ack = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    logs.configure("warning")
    consumer = Service(Config.load()).queue(queue).consumer()
    got = 0
    for got, msg in enumerate(consumer, start=1):
        if got <= ack:
            msg.ack()
        print(json.dumps({"payload": msg.payload.decode(), "id": str(msg.message_id),
                          "acked": got <= ack, "delivery_count": msg.delivery_count}), flush=True)
        if got >= hold:
            break
    assert consumer.flush(30) == 0
    print("HOLDING", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
