"""A consumer process for the paused-rebalance tests: ``python -m tests.paused_drain_proc QUEUE TOTAL``.

Lets its local backlog fill until fetching is paused, prints ``PAUSED``, waits for a line on stdin, then receives
and acks until it has seen TOTAL distinct payloads (or 90 s pass) and prints ``DONE <distinct>``.
"""

from __future__ import annotations

import sys
import time

from kmq import Config, Service, logs
from tests.markers_io import wait_for


def main() -> None:
    queue, total = sys.argv[1], int(sys.argv[2])
    logs.configure("warning")
    consumer = Service(Config.load()).queue(queue).consumer()
    assert wait_for(lambda: consumer.fetch_paused, timeout_s=60), "fetching never paused"
    print("PAUSED", flush=True)
    sys.stdin.readline()
    seen: set[bytes] = set()
    deadline = time.monotonic() + 90
    while len(seen) < total and time.monotonic() < deadline:
        msg = consumer.receive(0.2)
        if msg is not None:
            seen.add(msg.payload)
            msg.ack()
    print(f"DONE {len(seen)}", flush=True)
    consumer.close()


if __name__ == "__main__":
    main()
