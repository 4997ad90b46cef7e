"""A paced producer for the fault tests: ``python -m tests.cluster.producer_proc QUEUE COUNT RATE OUT``.

Sends up to COUNT messages ``m-<i>`` at RATE per second with send_async (until SIGTERM, then waits for the
reports) and appends each *confirmed* one to OUT
(``payload<TAB>unix time``): what the tests require to be handled. A failed send goes to OUT.failed; it was
never confirmed, so nothing is owed for it.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from kmq import Config, Delivery, MessageId, Service, logs

SLICE_S = 0.05


def main() -> int:
    queue, count, rate, out_path = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    logs.configure("warning")
    confirmed = open(out_path, "a", buffering=1)  # noqa: SIM115 - closed below, after the last report
    failed = open(out_path + ".failed", "a", buffering=1)  # noqa: SIM115

    def report(payload: str) -> object:
        def done(delivery: Delivery[MessageId]) -> None:
            error = delivery.exception(0)
            (failed if error else confirmed).write(f"{payload}\t{time.time():.3f}\n")
        return done

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    per_slice = max(1, round(rate * SLICE_S))
    started = time.monotonic()
    with Service(Config.load()).queue(queue).producer() as producer:
        for i in range(count):
            if stop.is_set():
                break
            if i % per_slice == 0:
                time.sleep(max(0.0, started + (i / per_slice) * SLICE_S - time.monotonic()))
            payload = f"m-{i}"
            producer.send_async(payload.encode()).add_done_callback(report(payload))  # type: ignore[arg-type]
        undelivered = producer.flush(120)
    confirmed.close()
    failed.close()
    return 1 if undelivered else 0


if __name__ == "__main__":
    sys.exit(main())
