"""The consumers of the topic-set bench: ``python -m tests.bench.sets_consumer CONFIG PER_QUEUE QUEUE...``.

Opens a consumer for each queue named (in its queue's set and group), prints READY once every one holds its
partitions, then receives and acks PER_QUEUE messages of each (written after READY) and prints one JSON line:
delivered, records read (all consumers), and the process's CPU seconds and the seconds from READY to the last ack:
reading and delivering, not start-up or group joins.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from kmq import Config, Consumer, logs


def main() -> None:
    path, per_queue, queues = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    logs.configure("error")
    config = Config.from_yaml(path, env={})
    consumers = [Consumer(config, q) for q in queues]
    deadline = time.monotonic() + 300
    while not all(c.assignment for c in consumers) and time.monotonic() < deadline:
        time.sleep(0.1)
    done = [0] * len(queues)
    last = [0.0]

    def drain(i: int) -> None:
        until = time.monotonic() + 900
        while done[i] < per_queue and time.monotonic() < until:
            batch = consumers[i].receive_many(per_queue - done[i], 0.5)
            for msg in batch:
                msg.ack()
            done[i] += len(batch)
        last[0] = max(last[0], time.perf_counter())

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(queues))]
    read_before = sum(c.records_read for c in consumers)
    started, cpu_started = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    print("READY", flush=True)
    for thread in threads:
        thread.join()
    cpu = time.process_time() - cpu_started
    read = sum(c.records_read for c in consumers) - read_before
    print(json.dumps({"delivered": sum(done), "records_read": read, "cpu_s": cpu, "seconds": last[0] - started}),
          flush=True)
    for consumer in consumers:
        consumer.close()


if __name__ == "__main__":
    main()
